// Embed mode (?embed=PANEL: a notebook's frame, an exported file) shows one panel of a page alone;
// the page neither asks for nor draws what its other panels would show.

// Whether the panel #NAME-panel is shown: always on the whole page, in embed mode only that one.
export function panelShown(name) {
  const embed = document.body.dataset.embed;
  return !embed || embed === name;
}
