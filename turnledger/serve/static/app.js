// turnledger serve: the conversation page. No build step, no dependency.
// Every text from the ledger is inserted with textContent (never as markup), so user, model or tool text
// that looks like HTML renders as text. The page's CSP forbids inline scripts anyway.
"use strict";

const params = new URLSearchParams(location.search);
const token = params.get("token") || "";

function api(path, options) {
  const headers = Object.assign({ "Content-Type": "application/json" }, (options || {}).headers || {});
  if (token) headers.Authorization = "Bearer " + token;
  return fetch(path, Object.assign({}, options || {}, { headers }));
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (name === "text") node.textContent = String(value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children) if (child) node.appendChild(child);
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function time(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : "";
}

const app = document.getElementById("app");
const BACKOFF_FIRST_MS = 1000;
const BACKOFF_MAX_MS = 30000;
const RETRIABLE = new Set([502, 503, 504]); // the server, or the Redis behind it, cannot answer for now

// The wait before retry number `attempt` (0 the first): its ceiling doubles from BACKOFF_FIRST_MS up to
// BACKOFF_MAX_MS, and the wait is drawn in the ceiling's upper half ("equal jitter"), so that the pages
// an outage stopped together do not all retry in step, and none retries at once.
function backoffDelay(attempt, random = Math.random) {
  const ceiling = Math.min(BACKOFF_FIRST_MS * 2 ** attempt, BACKOFF_MAX_MS);
  return ceiling / 2 + (random() * ceiling) / 2;
}

// One thing a page retries (its load, its live stream): one timer at a time, waits by backoffDelay.
class Retry {
  constructor() {
    this.attempts = 0;
    this.timer = null;
    this.stopped = false;
  }

  // runs `again` after the next wait, which it returns (in ms); never once stopped
  schedule(again) {
    const wait = backoffDelay(this.attempts);
    this.attempts += 1;
    this.cancel();
    if (!this.stopped) this.timer = setTimeout(() => { this.timer = null; again(); }, wait);
    return wait;
  }

  succeeded() { this.attempts = 0; }

  cancel() {
    clearTimeout(this.timer);
    this.timer = null;
  }

  stop() {
    this.stopped = true;
    this.cancel();
  }
}

function seconds(ms) {
  return Math.ceil(ms / 1000);
}

// The answer to `path`, or null when none came (the server is down or out of reach).
async function ask(path, options) {
  try {
    return await api(path, options);
  } catch (e) {
    return null;
  }
}

// A failed answer in the server's own words: serve answers {"error"} (a 503 quotes what Redis said).
async function refusal(response) {
  let error = "";
  try {
    error = JSON.parse(await response.text()).error || "";
  } catch (e) {
    // no JSON object (a proxy's page, say): its status says enough
  }
  return `the server answered ${response.status}` + (error ? `: ${error}` : "");
}

// Why a request failed (`response` null: no answer), and whether asking again may help: after no
// answer, or one of RETRIABLE, it may; any other answer (401, 403, 404 …) is final.
async function failure(response) {
  if (!response) return { why: "the server did not answer", retriable: true };
  return { why: await refusal(response), retriable: RETRIABLE.has(response.status) };
}

// Why an answer of the events URL is no live stream, as `failure` says; null when it is one.
async function streamFailure(response) {
  if (!response || !response.ok) return failure(response);
  if (/^text\/event-stream/.test(response.headers.get("Content-Type"))) return null;
  return { why: `the server answered ${response.status} with no event stream`, retriable: false };
}

// GETs `path` and hands the JSON of its 200 answer to `use`. A `failure` worth asking again is asked
// again after `retry`'s next wait, saying why; a final one is said once.
async function getRetrying(path, retry, say, use) {
  const response = await ask(path);
  if (response && response.ok) {
    retry.succeeded();
    return use(await response.json());
  }
  const { why, retriable } = await failure(response);
  if (!retriable) return say(`could not load: ${why}`);
  const wait = retry.schedule(() => getRetrying(path, retry, say, use));
  say(`could not load: ${why}; retrying in ${seconds(wait)} s…`);
}

function route() {
  const match = location.hash.match(/^#\/c\/(.+)$/);
  if (current) current.close();
  current = match ? new ConversationView(decodeURIComponent(match[1])) : new ListView();
}

class ListView {
  constructor() {
    this.retry = new Retry();
    this.build();
    getRetrying("api/conversations", this.retry, (text) => { this.status.textContent = text; },
      (body) => this.show(body.conversations));
  }

  close() { this.retry.stop(); }

  build() {
    clear(app);
    this.list = el("ul", { id: "conversations", "aria-label": "Conversations" });
    this.status = el("p", { id: "status", role: "status", "aria-live": "polite" });
    const form = el("form", { id: "open-form" },
      el("label", { for: "open-id", text: "Conversation id " }),
      el("input", { id: "open-id", name: "id", required: "required" }),
      el("button", { type: "submit", text: "Open" }));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      location.hash = "#/c/" + encodeURIComponent(form.elements.id.value);
    });
    app.append(el("h1", { text: "turnledger — conversations" }), form, this.status, this.list);
  }

  show(conversations) {
    this.status.textContent = "";
    for (const c of conversations) {
      const link = el("a", { href: "#/c/" + encodeURIComponent(c.conversationId), text: c.conversationId });
      this.list.appendChild(el("li", { "data-conversation": c.conversationId }, link,
        el("span", { class: "meta", text: ` revision ${c.revision ?? "–"}, ${c.turns} turns, ${time(c.updatedAtMs)}` })));
    }
    if (!conversations.length) this.list.appendChild(el("li", { text: "No conversation yet." }));
  }
}

class ConversationView {
  constructor(id) {
    this.id = id;
    this.blocks = new Map();      // block id -> committed block
    this.previews = new Map();    // "op/gen/index" -> {operationId, attemptGeneration, blockIndex, text, state}
    this.ops = new Map();         // operation id -> {current, timeline: [status...]}
    this.seen = new Set();        // SSE ids already applied
    this.quarantine = [];
    this.rejections = [];
    this.source = null;
    this.lastId = "0-0";          // the last SSE id applied: where a stream this page reopens resumes
    this.retry = new Retry();     // of the snapshot's load, then of the stream while it is closed
    this.paused = "";             // why live updates stopped, while they are
    this.closed = false;
    this.build();
    this.load();
  }

  close() {
    this.closed = true;
    this.retry.stop();
    this.stopListening();
  }

  stopListening() {
    this.retry.cancel();
    if (this.source) this.source.close();
    this.source = null;
  }

  build() {
    clear(app);
    const base = "api/conversations/" + encodeURIComponent(this.id);
    this.base = base;
    this.status = el("p", { id: "live", role: "status", "aria-live": "polite", text: "connecting…" });
    this.messages = el("ol", { id: "messages", "aria-label": "Messages" });
    this.timeline = el("div", { id: "operations" });
    this.quarantineList = el("ul", { id: "quarantine", "aria-label": "Quarantined events" });
    this.rejectionList = el("ul", { id: "rejections", "aria-label": "Rejections" });
    const text = el("textarea", { id: "composer-text", name: "text", rows: "3", "aria-label": "Message" });
    const send = el("button", { type: "submit", id: "send", text: "Send" });
    const sendDispatch = el("button", { type: "button", id: "send-dispatch", text: "Send and ask the model" });
    const dispatch = el("button", { type: "button", id: "dispatch", text: "Ask the model" });
    const form = el("form", { id: "composer" }, text, el("div", {}, send, sendDispatch, dispatch));
    const submit = async (andDispatch) => {
      const value = text.value;
      if (value.trim()) {
        const r = await api(base + "/turns", { method: "POST", body: JSON.stringify({ text: value }) });
        if (!r.ok) return this.say("the turn was refused: " + (await r.text()));
        text.value = "";
      }
      if (andDispatch) await this.dispatch();
    };
    form.addEventListener("submit", (e) => { e.preventDefault(); submit(false); });
    sendDispatch.addEventListener("click", () => submit(true));
    dispatch.addEventListener("click", () => this.dispatch());
    app.append(
      el("p", {}, el("a", { href: "#/", text: "← conversations" })),
      el("h1", { id: "title", text: "Conversation " + this.id }),
      this.status,
      el("section", { "aria-labelledby": "h-messages" }, el("h2", { id: "h-messages", text: "Messages" }),
        el("p", { class: "legend", text: "Committed messages are final. Previews (dashed, marked “preview”) " +
          "are provisional and may be retracted." }), this.messages, form),
      el("section", { "aria-labelledby": "h-ops" }, el("h2", { id: "h-ops", text: "Operations" }), this.timeline),
      el("section", { "aria-labelledby": "h-q" }, el("h2", { id: "h-q", text: "Quarantine" }), this.quarantineList),
      el("section", { "aria-labelledby": "h-r" }, el("h2", { id: "h-r", text: "Rejections" }), this.rejectionList),
    );
  }

  say(text) { this.status.textContent = text; }

  async dispatch() {
    const r = await api(this.base + "/dispatch", { method: "POST", body: "{}" });
    if (!r.ok) this.say("the dispatch was refused: " + (await r.text()));
  }

  async cancel(operationId) {
    await api(this.base + "/cancel", { method: "POST", body: JSON.stringify({ operationId }) });
  }

  load() {
    return getRetrying(this.base, this.retry, (text) => this.say(text), (snap) => this.loaded(snap));
  }

  loaded(snap) {
    for (const b of snap.history) this.blocks.set(b.id, b);
    for (const p of snap.previews) this.setPreview(p);
    for (const op of snap.operations) this.op(op.operationId).current = op;
    this.quarantine = snap.quarantine;
    this.rejections = snap.rejections;
    this.render();
    if (this.closed) return;
    this.say("connecting…");
    this.listen();
  }

  // The stream after the last event this page applied (its start after a snapshot's load).
  eventsUrl() {
    const query = "?after=" + encodeURIComponent(this.lastId) + (token ? "&token=" + encodeURIComponent(token) : "");
    return this.base + "/events" + query;
  }

  // The whole live stream (capped) gives the operations' timelines; every event applies idempotently.
  // EventSource resumes with Last-Event-ID after a disconnect, but gives up for good on an answer other
  // than 200 (serve's 503 while it cannot reach Redis, a 401 once the token is wrong): then the page
  // finds out why (`streamClosed`) and opens the stream again itself, after the last event it applied.
  listen() {
    const source = new EventSource(this.eventsUrl());
    this.source = source;
    source.onopen = () => {
      this.retry.succeeded();
      this.paused = "";
      this.say("live");
    };
    source.onerror = () => {
      if (source.readyState !== EventSource.CLOSED) return this.say(this.pausedText("reconnecting…"));
      this.streamClosed(source);
    };
    // serve ended the stream because Redis failed under it; EventSource retries after the hint it sent
    source.addEventListener("unavailable", () => {
      this.paused = "the server cannot reach Redis";
      this.say(this.pausedText("reconnecting…"));
    });
    // the stream's cap trimmed events this page had not seen: start again from the snapshot
    source.addEventListener("reset", () => this.reload());
    for (const kind of ["committed", "preview", "retracted", "status", "quarantined", "rejected"]) {
      source.addEventListener(kind, (e) => {
        if (this.seen.has(e.lastEventId)) return;
        this.seen.add(e.lastEventId);
        this.lastId = e.lastEventId;
        this.apply(kind, JSON.parse(e.data), e.lastEventId);
        this.render();
      });
    }
  }

  // EventSource shows neither the status nor the body of the answer it gave up on, so the page asks the
  // events URL again with fetch and aborts it once they are read (no second stream stays open). An
  // event stream (200) answers again: reopen it now. A `failure` worth asking again: reopen after the
  // next wait, saying why; a final one (401, 403, 404, a 200 that is no event stream): say it, once.
  async streamClosed(source) {
    const asking = new AbortController();
    const failed = await streamFailure(await ask(this.eventsUrl(), { signal: asking.signal, cache: "no-store" }));
    asking.abort();
    if (this.closed || this.source !== source) return; // left, or reloaded, meanwhile
    if (!failed) return this.listen();
    if (!failed.retriable) return this.say(`live updates stopped: ${failed.why}`);
    this.paused = failed.why;
    const wait = this.retry.schedule(() => this.listen());
    this.say(this.pausedText(`retrying in ${seconds(wait)} s…`));
  }

  pausedText(then) {
    return this.paused ? `live updates paused: ${this.paused}; ${then}` : then;
  }

  reload() {
    this.stopListening();
    this.lastId = "0-0";
    this.blocks.clear();
    this.previews.clear();
    this.ops.clear();
    this.seen.clear();
    this.say("reloading (missed events)…");
    this.load();
  }

  op(id) {
    if (!this.ops.has(id)) this.ops.set(id, { current: null, timeline: [] });
    return this.ops.get(id);
  }

  // A preview event carries the text appended at `textOffset` (code points) of the block's text, and
  // `length`, the text's length once appended; the snapshot carries the whole text (offset 0). The page
  // appends only at exactly the length it holds: an event ending at or before it is one already
  // applied (the stream is followed from its start after the snapshot), offset 0 replaces the text,
  // and one beyond it means an event was missed, so the snapshot is loaded again rather than
  // showing a text with a hole in it.
  setPreview(p) {
    const key = `${p.operationId}/${p.attemptGeneration}/${p.blockIndex}`;
    let known = this.previews.get(key);
    if (known && known.state === "retracted") {
      // a new read of the generation after its retraction (a replay): the withdrawn text stays shown
      // as withdrawn, under its own key, and the new text is a preview again
      this.withdrawn = (this.withdrawn || 0) + 1;
      this.previews.set(`${key}#withdrawn-${this.withdrawn}`, known);
      this.previews.delete(key);
      known = undefined;
    }
    if (known && p.length <= known.length) return;
    const offset = p.textOffset || 0;
    let text;
    if (offset === 0) text = p.text;
    else if (known && known.length === offset) text = known.text + p.text;
    else if (known) return this.reload();
    else return; // its start is older than this page's snapshot: the preview ended before it was loaded
    this.previews.set(key, Object.assign({}, p, { text, textOffset: 0, state: "preview" }));
  }

  apply(kind, data) {
    if (kind === "committed") {
      for (const b of data.blocks) this.blocks.set(b.id, b);
      if (data.operationId) {
        for (const [key, p] of this.previews) {
          if (p.operationId === data.operationId && p.state === "preview") this.previews.delete(key);
        }
      }
    } else if (kind === "preview") {
      this.setPreview(data);
    } else if (kind === "retracted") {
      for (const p of this.previews.values()) {
        if (p.operationId === data.operationId && p.attemptGeneration === data.attemptGeneration) {
          p.state = "retracted";
          p.reason = data.reason;
        }
      }
    } else if (kind === "status") {
      const op = this.op(data.operationId);
      op.timeline.push(data);
      if (data.accepted) op.current = Object.assign({}, op.current || {}, data);
    } else if (kind === "quarantined") {
      this.quarantine.push(data);
    } else if (kind === "rejected") {
      this.rejections.unshift(data);
    }
  }

  render() {
    this.renderMessages();
    this.renderOperations();
    this.renderList(this.quarantineList, this.quarantine, (q) =>
      `${q.reason}: ${q.eventType} ${q.eventId} of ${q.operationId} generation ${q.attemptGeneration}` +
      (q.detail ? ` — ${q.detail}` : ""));
    this.renderList(this.rejectionList, this.rejections, (r) =>
      `${r.reason}: ${r.eventType || "event"} ${r.eventId || ""}` + (r.detail ? ` — ${r.detail}` : ""));
  }

  renderList(list, items, describe) {
    clear(list);
    for (const item of items) list.appendChild(el("li", { text: describe(item) }));
    if (!items.length) list.appendChild(el("li", { class: "none", text: "none" }));
  }

  renderMessages() {
    clear(this.messages);
    const blocks = [...this.blocks.values()].sort((a, b) => a.ordering - b.ordering);
    const results = new Map(blocks.filter((b) => b.kind === "tool_result").map((b) => [b.callId, b]));
    for (const b of blocks) {
      if (b.kind === "tool_result" && blocks.some((c) => c.kind === "tool_call" && c.callId === b.callId)) continue;
      this.messages.appendChild(this.committedItem(b, results));
    }
    const previews = [...this.previews.values()].sort((a, b) =>
      a.operationId.localeCompare(b.operationId) || a.attemptGeneration - b.attemptGeneration ||
      a.blockIndex - b.blockIndex);
    for (const p of previews) this.messages.appendChild(this.previewItem(p));
  }

  committedItem(b, results) {
    const who = b.role === "user" ? "you" : b.role;
    const item = el("li", {
      class: `message committed role-${b.role} kind-${b.kind}`, "data-state": "committed",
      "data-block-id": b.id, "aria-label": `Committed ${b.kind.replace("_", " ")} from ${who}, final`,
    }, el("span", { class: "badge", text: "committed" }), el("span", { class: "who", text: who }));
    if (b.kind === "tool_call") {
      item.appendChild(el("div", { class: "tool" },
        el("span", { class: "tool-name", text: `calls ${b.toolName}` }),
        el("code", { class: "arguments", text: b.arguments || "" })));
      const result = results.get(b.callId);
      item.appendChild(result
        ? el("div", { class: "tool-result", "data-call-id": b.callId, "aria-label": "Tool result" },
          el("span", { class: "badge", text: `result ${result.resultStatus || ""}` }),
          el("span", { class: "text", text: result.text || "" }))
        : el("div", { class: "tool-result pending", text: "no result yet" }));
    } else {
      item.appendChild(el("span", { class: "text", text: b.text || "" }));
    }
    return item;
  }

  previewItem(p) {
    const retracted = p.state === "retracted";
    const label = retracted
      ? `Retracted preview of generation ${p.attemptGeneration}: this text was withdrawn` +
        (p.reason ? ` (${p.reason})` : "")
      : `Preview of generation ${p.attemptGeneration}, provisional: still streaming and may be retracted`;
    return el("li", {
      class: `message preview ${retracted ? "retracted" : "provisional"}`, "data-state": p.state,
      "data-operation-id": p.operationId, "data-generation": p.attemptGeneration, "aria-label": label,
    },
    el("span", { class: "badge", text: retracted ? `retracted${p.reason ? ": " + p.reason : ""}` : "preview — may be retracted" }),
    el(retracted ? "del" : "span", { class: "text", text: p.text }));
  }

  renderOperations() {
    clear(this.timeline);
    for (const [id, op] of [...this.ops.entries()].sort()) {
      const state = (op.current && op.current.state) || "?";
      const steps = el("ol", { class: "timeline", "aria-label": `Timeline of ${id}` });
      for (const s of op.timeline) {
        const text = `${time(s.occurredAtMs)} ${s.previousState ? s.previousState + " → " : ""}${s.state}` +
          ` (generation ${s.attemptGeneration})` + (s.reason ? ` ${s.reason}` : "") +
          (s.detail ? ` — ${s.detail}` : "") + (s.accepted ? "" : " [refused]");
        steps.appendChild(el("li", { "data-state": s.state, class: s.accepted ? "" : "refused", text }));
      }
      const box = el("article", { class: "operation", "data-operation-id": id, "data-op-state": state },
        el("h3", { text: `${id}: ${state}` }), steps);
      if (!["COMMITTED", "CANCELLED", "REJECTED", "PAUSED"].includes(state)) {
        const cancel = el("button", { type: "button", class: "cancel", text: "Cancel" });
        cancel.addEventListener("click", () => this.cancel(id));
        box.appendChild(cancel);
      }
      this.timeline.appendChild(box);
    }
    if (!this.ops.size) this.timeline.appendChild(el("p", { class: "none", text: "no operation yet" }));
  }
}

let current = null;
window.addEventListener("hashchange", route);
route();
