// The top-up form: our API creates the top-up and its PaymentIntent, Stripe.js confirms the
// card payment, and the page waits for Stripe's webhook to credit the wallet (the browser's
// word that it paid is never enough).
(function () {
  "use strict";

  const form = document.getElementById("top-up-form");
  if (!form || typeof Stripe === "undefined") return;

  const stripe = Stripe(form.dataset.publishableKey);
  const card = stripe.elements().create("card");
  card.mount("#card-element");

  const amountInput = document.getElementById("top-up-amount");
  const amountError = document.getElementById("top-up-amount-error");
  const submit = document.getElementById("top-up-submit");
  const statusBox = document.getElementById("top-up-status");

  function showStatus(kind, text) {
    statusBox.className = "mt-3 alert alert-" + kind;
    statusBox.textContent = text;
  }

  function fieldError(message) {
    amountInput.classList.toggle("is-invalid", Boolean(message));
    amountError.textContent = message || "";
  }

  async function api(url, options) {
    const response = await fetch(url, {
      credentials: "same-origin",
      ...options,
      headers: {
        "Accept": "application/json",
        "Content-Type": "application/json",
        "X-CSRFToken": form.dataset.csrfToken,
        ...(options && options.headers),
      },
    });
    const body = await response.json().catch(() => ({}));
    return { response, body };
  }

  async function waitForCredit(topUpUrl) {
    const deadline = Date.now() + 60000;
    while (Date.now() < deadline) {
      const { response, body } = await api(topUpUrl, { method: "GET" });
      if (response.ok && body.status === "succeeded") return true;
      if (response.ok && body.status === "failed") {
        throw new Error(body.failure_reason || "The payment failed.");
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    return false;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    fieldError("");
    submit.disabled = true;
    try {
      showStatus("secondary", "Creating the payment…");
      // One key per attempt: a double click or a retried request makes one top-up.
      const key = window.crypto.randomUUID();
      const { response, body } = await api(form.dataset.apiUrl, {
        method: "POST",
        headers: { "Idempotency-Key": key },
        body: JSON.stringify({ amount: amountInput.value }),
      });
      if (!response.ok) {
        const fields = (body.extra && body.extra.fields) || {};
        if (fields.amount) fieldError(fields.amount.join(" "));
        showStatus("danger", body.detail || "The top-up could not be created.");
        return;
      }
      showStatus("secondary", "Confirming the card payment…");
      const result = await stripe.confirmCardPayment(body.client_secret, {
        payment_method: { card: card },
      });
      if (result.error) {
        showStatus("danger", result.error.message || "The card payment failed.");
        return;
      }
      showStatus("info", "Payment accepted. Waiting for Stripe to confirm it…");
      const credited = await waitForCredit(form.dataset.apiUrl + body.id + "/");
      if (credited) {
        showStatus("success", `${body.amount} ${body.currency} was added to the wallet.`);
        window.setTimeout(() => window.location.reload(), 1200);
      } else {
        showStatus("warning", "Stripe has not confirmed the payment yet; the wallet is credited when it does.");
      }
    } catch (error) {
      showStatus("danger", error.message || String(error));
    } finally {
      submit.disabled = false;
    }
  });
})();
