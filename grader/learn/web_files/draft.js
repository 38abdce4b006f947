// speculate: grey chips are the draft's cheap guesses; one marigold sweep is the target checking them all
// in one call; mint stays (kept), coral is corrected with the target's own token. Each drafted token is one
// element with data-chip = draft | kept | corrected; guesses after a correction are never used (they stay
// draft, dimmed). The target's bonus token, when it kept every guess, is no chip: nobody drafted it.
"use strict";
(() => {
  const { el, shown, sleep } = Kata;
  let view = null;

  function chip(ch, round, index) {
    return el("span", { class: "chip", "data-chip": "draft", "data-round": round, "data-index": index,
      title: "a draft guess, not checked yet" },
      el("span", { class: "glyph", text: shown(ch) }), el("span", { class: "mark", "aria-hidden": "true", text: "?" }));
  }

  function mark(node, state, said, title) {
    node.dataset.chip = state;
    node.querySelector(".mark").textContent = said;
    node.title = title;
  }

  function reset(stage, run) {
    const o = run.options;
    view = {
      text: el("span", {}),
      calls: el("b", { text: "0" }),
      plain: el("b", { text: "0" }),
      kept: el("b", { text: "0" }),
      rounds: el("div", { class: "rounds" }),
      end: el("div", {}),
    };
    stage.replaceChildren(
      el("p", { class: "status", text: `The draft guesses up to ${o.k} characters a round; the target checks them all in one call.` }),
      el("div", { class: "legend" },
        el("span", {}, el("span", { class: "chip", "data-chip": "draft" }, "a", el("span", { class: "mark", text: "?" })), " draft guess"),
        el("span", {}, el("span", { class: "chip", "data-chip": "kept" }, "a", el("span", { class: "mark", text: "\u2713" })), " kept"),
        el("span", {}, el("span", { class: "chip", "data-chip": "corrected" }, "a\u2192b", el("span", { class: "mark", text: "\u2717" })), " corrected"),
        el("span", {}, el("span", { class: "bonus", text: "+b" }), " the target's bonus token")),
      el("div", { class: "counts" },
        el("span", {}, "target calls ", view.calls),
        el("span", {}, "plain decoding ", view.plain),
        el("span", {}, "guesses kept ", view.kept)),
      el("p", { class: "text" }, el("span", { class: "prompt", text: o.prompt }), view.text),
      view.rounds,
      view.end,
    );
  }

  async function playRound(run, r, number, mine, totals) {
    const row = el("div", { class: "round", "data-round": number },
      el("span", { class: "label", text: `call ${number + 1}` }));
    view.rounds.append(row);
    const chips = [];
    for (const [i, id] of r.drafts.entries()) {
      chips.push(chip(run.vocab[id], number, i));
      row.append(chips[i]);
      await sleep(90, mine);
    }
    const sweep = el("span", { class: "sweep", "aria-hidden": "true" });
    row.append(sweep);
    sweep.classList.add("go"); // the one verify call
    await sleep(560, mine);
    sweep.remove();
    chips.forEach((c, i) => {
      if (i < r.kept) mark(c, "kept", "\u2713", "kept: the target would have written it too");
      else if (i === r.kept && r.correction !== null) {
        c.querySelector(".glyph").replaceChildren(
          el("span", { class: "was", text: shown(run.vocab[r.drafts[i]]) }), "\u2192" + shown(run.vocab[r.correction]));
        mark(c, "corrected", "\u2717", "corrected: the target wrote its own token here");
      } else if (i > r.kept) { c.classList.add("unchecked"); c.title = "never used: a guess before it was corrected"; }
    });
    if (r.bonus !== null) row.append(el("span", { class: "bonus", "data-bonus": "", title: "the target's own next token, free with its check", text: "+" + shown(run.vocab[r.bonus]) }));
    totals.written += r.emitted.length;
    totals.kept += r.kept;
    view.text.append(r.emitted.map((id) => run.vocab[id]).join(""));
    view.calls.textContent = String(number + 1);
    view.plain.textContent = String(totals.written);
    view.kept.textContent = `${totals.kept} of ${totals.drafted += r.drafts.length}`;
    await sleep(260, mine);
  }

  async function play(run, mine) {
    const totals = { written: 0, kept: 0, drafted: 0 };
    for (const [number, r] of run.rounds.entries()) await playRound(run, r, number, mine, totals);
    const perCall = (run.plain_calls / run.target_calls).toFixed(2);
    view.end.append(
      el("p", { class: "summary", "data-summary": "" },
        `${run.target_calls} target calls for ${run.plain_calls} characters, ${perCall} a call; plain decoding takes ${run.plain_calls}.`),
      el("p", { "data-same": run.same ? "yes" : "no" }, run.same
        ? "\u2713 The same text as the target's own greedy decoding."
        : "\u2717 NOT the target's own greedy text: the rounds changed what it writes."),
    );
  }

  Kata.widget({ reset, play });
})();
