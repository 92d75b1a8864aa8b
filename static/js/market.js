// The offer page's order forms: as the user types, show the hold the order will place
// (price x units, x the window's hours for a reserved block, whose price is per core-hour)
// beside the selected organization's available balance. Money is counted in
// millionths with BigInt, as the server counts it, so that 0.1 x 3 is 0.30 and not
// 0.30000000000000004. The server still decides: this only saves a refused round trip.
(function () {
  "use strict";

  const PLACES = 6;
  const SCALE = 10n ** BigInt(PLACES);
  const CENT = 10n ** BigInt(PLACES - 2);

  const walletsElement = document.getElementById("market-wallets");
  if (!walletsElement) return;
  const wallets = JSON.parse(walletsElement.textContent);

  // "12.5" -> 12500000n; null for anything that is not a plain non-negative decimal.
  function toMillionths(text) {
    const match = /^\s*(\d+)(?:\.(\d{0,6}))?\s*$/.exec(text || "");
    if (!match) return null;
    return BigInt(match[1]) * SCALE + BigInt((match[2] || "").padEnd(PLACES, "0"));
  }

  function wholeUnits(text) {
    const match = /^\s*(\d+)\s*$/.exec(text || "");
    return match ? BigInt(match[1]) : null;
  }

  // Rounded half up to the cent with thousands grouped, as the pages' amounts are
  // (computeshare/figures.py): "< 0.01" for an amount that is not zero but under half a cent.
  function money(millionths) {
    const cents = (millionths + CENT / 2n) / CENT;
    if (millionths > 0n && cents === 0n) return "< 0.01";
    const whole = (cents / 100n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return `${whole}.${(cents % 100n).toString().padStart(2, "0")}`;
  }

  function setUp(form) {
    const prefix = form.dataset.prefix;
    const currency = form.dataset.currency;
    const field = (name) => form.elements[`${prefix}-${name}`];
    const organization = field("organization");
    const quantity = field("quantity");
    const price = field("price");
    const preview = form.querySelector("[data-hold-preview]");
    const amount = preview.querySelector("[data-hold-amount]");
    const note = preview.querySelector("[data-hold-note]");
    const unitHours = BigInt(form.dataset.unitHours || "1");

    function update() {
      const units = wholeUnits(quantity.value);
      const unitPrice = toMillionths(price ? price.value : form.dataset.unitPrice);
      const wallet = wallets[organization.value];
      if (units === null || unitPrice === null || units === 0n || unitPrice === 0n) {
        amount.textContent = "—";
        note.textContent = price
          ? "Enter the units and the price per unit to see the hold."
          : "Enter the units to see the hold.";
        preview.classList.remove("text-danger");
        return;
      }
      const hold = units * unitHours * unitPrice;
      amount.textContent = `${money(hold)} ${currency}`;
      if (!wallet) {
        note.textContent = "";
        return;
      }
      const available = toMillionths(wallet.available);
      const short = available !== null && hold > available;
      preview.classList.toggle("text-danger", short);
      note.textContent = short
        ? `More than the ${money(available)} ${currency} available to ${wallet.name}: ` +
          "the order would be refused."
        : `Of the ${money(available)} ${currency} available to ${wallet.name}.`;
    }

    for (const input of [organization, quantity, price]) {
      if (!input) continue;
      input.addEventListener("input", update);
      input.addEventListener("change", update);
    }
    update();
  }

  document.querySelectorAll("form[data-hold-form]").forEach(setUp);
})();
