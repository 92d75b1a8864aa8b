// Back from Stripe's onboarding, the account is active only once Stripe's account.updated
// reaches us: ask our API for the status every two seconds (for a minute at most) and reload
// the page when it changes.
(function () {
  "use strict";

  const card = document.getElementById("stripe-account");
  if (!card || card.dataset.awaiting !== "1") return;

  let tries = 0;
  async function check() {
    tries += 1;
    try {
      const response = await fetch(card.dataset.statusUrl, {
        headers: {Accept: "application/json"},
        credentials: "same-origin",
      });
      if (response.ok) {
        const body = await response.json();
        const account = body.connected_account;
        if (account && account.status !== card.dataset.status) {
          window.location.replace(window.location.pathname);
          return;
        }
      }
    } catch (err) {
      // A network hiccup: the next try asks again.
    }
    if (tries < 30) window.setTimeout(check, 2000);
  }
  window.setTimeout(check, 2000);
})();
