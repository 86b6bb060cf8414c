// A feature's top held-out passages as lines of text, each token shaded by the feature's activation
// on it (hover for the number) and the peak outlined: an SAE feature's (/features) and a transcoder
// feature's (/attribution). The shading only shows the answer's activations.
import { el } from "./dom.js";
import { decimal, visible } from "./format.js";
import { divColour, inkOn } from "./palette.js";

// `passages` as the API gives them (tokens with their activation, the peak's index), shaded on a
// scale up to `maxAct`: one div.passage each, its largest activation first.
export function passageLines(passages, maxAct) {
  return passages.map((p) => el("div", { class: "passage" },
    el("span", { class: "value", text: decimal(p.activation, 2) }),
    ...p.tokens.map((t, i) => {
      const bg = divColour(t.activation, maxAct);
      return el("span", { class: `act${i === p.peak ? " peak" : ""}`, text: visible(t.text), style: `background:${bg};color:${inkOn(bg)}`,
        title: `“${visible(t.text)}” (id ${t.id}): ${decimal(t.activation, 3)}` });
    })));
}
