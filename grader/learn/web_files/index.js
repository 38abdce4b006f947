// The index: the four widgets, each a link that carries the page's token.
"use strict";
(() => {
  const { el, root, link, config } = Kata;
  const about = {
    cache: "Write a sentence re-reading everything, then remembering it: the same sentence, a fraction of the work.",
    quantize: "Step the bits down from 8 to 2 and watch real weights snap to the nearest allowed level.",
    speculate: "Grey chips are the draft's guesses; one marigold sweep is the big model checking them all.",
    stack: "The three tricks together on the MoE teacher, each one measured against the one before.",
  };
  root.querySelector(".controls").remove();
  root.querySelector(".crumbs").remove();
  root.querySelector(".sources").remove();
  root.dataset.state = "done";
  const cards = el("div", { class: "cards" });
  for (const [name, title] of Object.entries(config.titles)) {
    cards.append(el("a", { href: link(name), "data-widget-link": name },
      el("strong", { text: title }), about[name]));
  }
  root.querySelector(".stage").replaceChildren(
    el("p", {}, "Each widget runs your own kata code, in its jail, once its tasks pass (", el("code", { text: "kata grade" }),
      "); until then the model's own code plays, and the page says so."),
    cards);
})();
