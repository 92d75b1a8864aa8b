// Copy buttons: <button data-copy-target="input-id">.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy-target]");
  if (!button) return;
  const input = document.getElementById(button.dataset.copyTarget);
  input.select();
  navigator.clipboard?.writeText(input.value).then(() => {
    button.innerHTML = '<i class="bi bi-check2"></i> Copied';
  });
});
