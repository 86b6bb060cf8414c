// Two step players: the BPE merges of one pre-token (POST /api/v1/tokenize/merges), and the
// built-in tokenizer's training record (GET /api/v1/tokenizer/model/merges).
import { apiGet } from "../lib/api.js";
import { grouped } from "../lib/format.js";
import { tokenLabel } from "../lib/tokens.js";

const PLAY_MS = 550;

function chip(entry, cls = "") {
  const s = document.createElement("span");
  s.className = `tkchip ${cls}`.trim();
  s.textContent = tokenLabel(entry);
  s.title = `id ${entry.id} · bytes ${entry.bytes_hex.match(/../g).join(" ")}`;
  return s;
}

class Player {
  constructor(playBtn) {
    this.playBtn = playBtn;
    this.timer = null;
  }
  stop() {
    clearInterval(this.timer);
    this.timer = null;
    this.playBtn.textContent = "▶ Play";
  }
  toggle(canStep, step) {
    if (this.timer) { this.stop(); return; }
    if (!canStep()) return;
    this.playBtn.textContent = "❚❚ Pause";
    this.timer = setInterval(() => { if (canStep()) step(); else this.stop(); }, PLAY_MS);
  }
}

export class MergeStepper {
  constructor(els) {
    this.els = els; // {pieces, steps, status, final, play, reset, back, step}
    this.answer = null; // the /tokenize/merges response shown
    this.data = null; // its pre-token
    this.vocab = new Map();
    this.k = 0;
    this.player = new Player(els.play);
    els.reset.addEventListener("click", () => { this.player.stop(); this.go(0); });
    els.back.addEventListener("click", () => { this.player.stop(); this.go(this.k - 1); });
    els.step.addEventListener("click", () => { this.player.stop(); this.go(this.k + 1); });
    els.play.addEventListener("click", () => {
      if (this.data && this.k >= this.data.steps.length) this.go(0);
      this.player.toggle(() => this.data && this.k < this.data.steps.length, () => this.go(this.k + 1));
    });
    els.steps.addEventListener("click", (e) => {
      const li = e.target.closest("li[data-step]");
      if (li) { this.player.stop(); this.go(+li.dataset.step); }
    });
  }

  clear(message) {
    this.player.stop();
    this.answer = null;
    this.data = null;
    this.els.pieces.replaceChildren();
    this.els.steps.replaceChildren();
    this.els.final.textContent = "";
    this.els.status.textContent = message || "";
  }

  show(resp) {
    this.player.stop();
    this.answer = resp;
    this.vocab = new Map(resp.vocab.map((v) => [v.id, v]));
    this.data = resp.pretokens.find((p) => !p.special) || resp.pretokens[0];
    const frag = document.createDocumentFragment();
    this.data.steps.forEach((s) => {
      const li = document.createElement("li");
      li.dataset.step = s.step;
      const rank = document.createElement("span");
      rank.className = "rank";
      rank.textContent = `rank ${grouped(s.rank)}`;
      li.append(rank, chip(this.vocab.get(s.left)), " + ", chip(this.vocab.get(s.right)), " → ",
        chip(this.vocab.get(s.merged), "new"));
      frag.appendChild(li);
    });
    this.els.steps.replaceChildren(frag);
    if (this.data.special) {
      this.els.final.textContent = `A special token: never split, no merges. Id ${this.data.tokens[0].id}.`;
    } else {
      const parts = [`When no merge is left: ${grouped(this.data.tokens.length)} token${this.data.tokens.length === 1 ? "" : "s"} `];
      for (const t of this.data.tokens) parts.push(chip(t, "new"), ` id ${t.id}  `);
      this.els.final.replaceChildren(...parts);
    }
    this.go(0);
  }

  go(k) {
    const d = this.data;
    if (!d) return;
    k = Math.max(0, Math.min(k, d.steps.length));
    this.k = k;
    const ids = k === 0 ? d.byte_ids : d.steps[k - 1].piece_ids;
    const made = k === 0 ? -1 : d.steps[k - 1].position;
    const next = k < d.steps.length ? d.steps[k].position : -1;
    const frag = document.createDocumentFragment();
    ids.forEach((id, i) => {
      const entry = this.vocab.get(id);
      const box = document.createElement("span");
      box.className = `piece${i === made ? " made" : ""}${next >= 0 && (i === next || i === next + 1) ? " next" : ""}`;
      box.dataset.id = id;
      const text = document.createElement("span");
      text.className = "piece-text";
      text.textContent = tokenLabel(entry);
      const idEl = document.createElement("span");
      idEl.className = "piece-id";
      idEl.textContent = id;
      box.append(text, idEl);
      box.title = `id ${id} · bytes ${entry.bytes_hex.match(/../g).join(" ")}`;
      frag.appendChild(box);
    });
    this.els.pieces.replaceChildren(frag);
    this.els.pieces.dataset.step = k;
    for (const li of this.els.steps.children) {
      const s = +li.dataset.step;
      li.className = s === k ? "current" : s < k ? "done" : "";
    }
    const cur = this.els.steps.querySelector("li.current");
    if (cur && this.els.steps.scrollHeight > this.els.steps.clientHeight) {
      this.els.steps.scrollTop = cur.offsetTop - this.els.steps.offsetTop - this.els.steps.clientHeight / 2;
    }
    const n = d.steps.length;
    let status;
    if (d.special) status = "special token";
    else if (n === 0) status = "no merge applies: each byte stays a token";
    else if (k === 0) status = `single bytes · ${n} merges to go · dashed: the pair merged next`;
    else if (k < n) status = `step ${k} of ${n} · green: just merged (rank ${grouped(d.steps[k - 1].rank)}) · dashed: merged next`;
    else status = `step ${n} of ${n} · done: no neighbouring pair is in the vocabulary`;
    this.els.status.textContent = status;
    this.els.back.disabled = k === 0;
    this.els.reset.disabled = k === 0;
    this.els.step.disabled = k >= n;
  }
}

export class TrainingReplay {
  constructor(els, pageSize = 50) {
    this.els = els; // {tbody, status, play, step, reset, all, more}
    this.merges = [];
    this.total = null;
    this.shown = 0;
    this.pageSize = pageSize;
    this.player = new Player(els.play);
    els.step.addEventListener("click", () => { this.player.stop(); this.reveal(this.shown + 1); });
    els.reset.addEventListener("click", () => { this.player.stop(); this.reveal(1); });
    els.all.addEventListener("click", () => { this.player.stop(); this.reveal(this.merges.length); });
    els.more.addEventListener("click", () => { this.player.stop(); this.load().then(() => this.reveal(this.merges.length)); });
    els.play.addEventListener("click", () => {
      if (this.shown >= this.merges.length) this.reveal(1);
      this.player.toggle(() => this.shown < this.merges.length, () => this.reveal(this.shown + 1));
    });
  }

  async load() {
    const body = await apiGet(`/tokenizer/model/merges?offset=${this.merges.length}&limit=${this.pageSize}`);
    this.total = body.total;
    this.corpus = body.corpus;
    const frag = document.createDocumentFragment();
    for (const m of body.merges) {
      const tr = document.createElement("tr");
      tr.dataset.rank = m.rank;
      const cells = [grouped(m.rank), chip(m.left), "+", chip(m.right), "→", chip(m.token, "new"), grouped(m.id), grouped(m.count)];
      cells.forEach((c, i) => {
        const td = document.createElement("td");
        if (i === 0 || i >= 6) td.className = "num";
        td.append(c);
        tr.appendChild(td);
      });
      frag.appendChild(tr);
      this.merges.push(m);
    }
    this.els.tbody.appendChild(frag);
    this.els.more.disabled = this.merges.length >= this.total;
  }

  reveal(n) {
    this.shown = Math.max(0, Math.min(n, this.merges.length));
    Array.from(this.els.tbody.children).forEach((tr, i) => {
      tr.hidden = i >= this.shown;
      tr.classList.toggle("latest", i === this.shown - 1);
    });
    this.els.status.textContent = `showing the first ${grouped(this.shown)} of ${grouped(this.total)} merges learned from ${this.corpus}`;
    this.els.step.disabled = this.shown >= this.merges.length;
  }
}
