/**
 * The console's one page: plain HTML, a little CSS, and a script that builds the tables with textContent only (no
 * message text ever becomes markup). No framework: the page is small, and a bundle would be a build step for the
 * CLI. Native <dialog> gives the confirmation its focus handling; the progress region is aria-live.
 */
export function renderPage({ token, nonce }: { token: string; nonce: string }): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="sbinbox-token" content="${token}">
<title>sbinbox console</title>
<style nonce="${nonce}">
${STYLE}
</style>
</head>
<body>
${MARKUP}
<script nonce="${nonce}">
${SCRIPT}
</script>
</body>
</html>
`;
}

/** The page's CSS (served under the nonce: the Content-Security-Policy allows no other style). */
const STYLE = `  body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1b1b1b; max-width: 72rem; }
  h1 { font-size: 1.4rem; margin: 0 0 .5rem; }
  h2 { font-size: 1.15rem; margin: 1.5rem 0 .5rem; }
  h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
  dl.counts { display: flex; gap: 2rem; margin: .5rem 0; }
  dl.counts div { border: 1px solid #bbb; padding: .4rem .8rem; border-radius: 4px; }
  dt { font-size: .85rem; color: #444; } dd { margin: 0; font-size: 1.3rem; font-weight: 600; }
  table { border-collapse: collapse; width: 100%; margin: .3rem 0; }
  th, td { border-bottom: 1px solid #ddd; padding: .25rem .4rem; text-align: left; vertical-align: top; font-size: .9rem; }
  th { background: #f3f3f3; }
  button { font: inherit; padding: .25rem .7rem; margin: .2rem .3rem .2rem 0; cursor: pointer; }
  button.danger { border: 1px solid #a00; color: #a00; background: #fff; }
  button:focus-visible, input:focus-visible { outline: 3px solid #1a5fb4; outline-offset: 2px; }
  pre { background: #f6f6f6; padding: .4rem; white-space: pre-wrap; margin: .2rem 0; }
  section.group { border: 1px solid #ccc; border-radius: 4px; padding: .2rem .8rem .6rem; margin: .8rem 0; }
  #progress { min-height: 1.5rem; font-weight: 600; }
  dialog { max-width: 36rem; } dialog ul { max-height: 12rem; overflow: auto; }
  .muted { color: #555; }
  td.body pre { max-height: 20rem; overflow: auto; overflow-wrap: anywhere; max-width: 40rem; }
  td { overflow-wrap: anywhere; }
  fieldset { border: 1px solid #ccc; border-radius: 4px; margin: .5rem 0; }
  fieldset label { margin-right: 1rem; display: inline-block; }
  #lost { border: 2px solid #a00; padding: .4rem .8rem; background: #fff4f4; }
  .reasons { display: flex; flex-wrap: wrap; gap: .5rem 1rem; }`;

/** The page's markup: every region the script fills, labelled for a screen reader. */
const MARKUP = `<header>
  <h1>sbinbox console: <span id="entity">…</span></h1>
  <p id="operator"></p>
  <button type="button" id="sign-out">Sign out</button>
  <p class="muted">Reads peek at the whole dead-letter queue and lock nothing. A replay or purge asks first, then acts on exactly the confirmed messages, by sequence number; a purge archives each message before deleting it. Every plan and run is logged with your name.</p>
</header>
<main>
  <section aria-labelledby="counts-heading">
    <h2 id="counts-heading">Counts</h2>
    <dl class="counts">
      <div><dt>Active messages</dt><dd id="active">…</dd></div>
      <div><dt>Scheduled</dt><dd id="scheduled">…</dd></div>
      <div><dt>Dead-lettered</dt><dd id="dead">…</dd></div>
    </dl>
    <p id="counted" class="muted"></p>
    <button type="button" id="refresh">Refresh</button>
  </section>
  <section aria-labelledby="db-heading">
    <h2 id="db-heading">Inbox and outbox</h2>
    <div id="database"><p class="muted">…</p></div>
  </section>
  <section aria-labelledby="dlq-heading">
    <h2 id="dlq-heading">Dead-letter queue by reason</h2>
    <div id="groups"></div>
  </section>
  <section aria-labelledby="list-heading">
    <h2 id="list-heading">Dead letters</h2>
    <fieldset>
      <legend>Filter</legend>
      <label>Reason <select id="f-reason"><option value="">any</option></select></label>
      <label>Type <select id="f-type"><option value="">any</option></select></label>
      <label>MessageId or inbox key <input id="f-id" type="text" size="24"></label>
      <label>Enqueued from <input id="f-from" type="datetime-local" step="1"></label>
      <label>to <input id="f-to" type="datetime-local" step="1"></label>
      <button type="button" id="f-apply">Apply filter</button>
      <button type="button" id="f-clear">Clear filter</button>
    </fieldset>
    <p id="matching" aria-live="polite"></p>
    <div>
      <button type="button" id="select-all">Select all matching</button>
      <button type="button" id="select-none">Clear selection</button>
      <span id="selection" aria-live="polite">Nothing selected.</span>
    </div>
    <table id="list">
      <thead><tr><th scope="col">Select</th><th scope="col">MessageId</th><th scope="col">Inbox key</th><th scope="col">Reason</th><th scope="col">Type</th><th scope="col">Enqueued</th><th scope="col">Deliveries</th><th scope="col">Description</th><th scope="col">Body and properties</th></tr></thead>
      <tbody></tbody>
    </table>
    <div>
      <button type="button" id="prev">Previous page</button>
      <span id="page-of"></span>
      <button type="button" id="next">Next page</button>
    </div>
    <div>
      <button type="button" id="replay-selected">Replay selected</button>
      <button type="button" id="purge-selected" class="danger">Purge selected</button>
      <label id="set-aside-label" hidden><input type="checkbox" id="set-aside"> Set the other dead letters passed aside (deferred) for good, rather than abandon them</label>
    </div>
  </section>
  <section aria-labelledby="progress-heading">
    <h2 id="progress-heading">Progress and results</h2>
    <div id="progress" role="status" aria-live="polite" tabindex="-1"></div>
    <div id="lost" role="alert" hidden></div>
    <progress id="bar" max="1" value="0" aria-label="Progress of the running action" hidden></progress>
    <table id="results" hidden>
      <caption class="muted">Result per message</caption>
      <thead><tr><th scope="col">MessageId</th><th scope="col">Result</th><th scope="col">Detail</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
</main>
<dialog id="confirm" aria-labelledby="confirm-title" aria-describedby="confirm-text">
  <h2 id="confirm-title">Confirm</h2>
  <p id="confirm-text"></p>
  <p id="confirm-set-aside" role="alert" hidden></p>
  <ul id="confirm-list"></ul>
  <button type="button" id="confirm-yes"></button>
  <button type="button" id="confirm-no">Cancel</button>
</dialog>`;

/** The page's script: builds every cell with textContent, polls a run, and says what happened when the console is gone. */
const SCRIPT = `"use strict";
const token = document.querySelector('meta[name="sbinbox-token"]').content;
const $ = (id) => document.getElementById(id);
const el = (tag, text, attrs = {}) => {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};
const PAGE = 50;
const n = (x) => Number(x).toLocaleString("en");
async function api(path, body) {
  const init = { headers: { "x-sbinbox-token": token } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  let value;
  try { value = await res.json(); } catch { value = {}; }
  if (!res.ok) {
    const error = new Error(value.error || res.statusText);
    error.status = res.status;
    throw error;
  }
  return value;
}
const say = (text) => { $("progress").textContent = text; };

function renderDatabase(state) {
  const box = $("database");
  box.replaceChildren();
  if (!state.inbox && !state.outbox) {
    box.append(el("p", "No database configured (SBINBOX_DATABASE and its settings): inbox and outbox not shown.", { class: "muted" }));
    return;
  }
  const dl = el("dl", undefined, { class: "counts" });
  const item = (label, value, id) => {
    const d = el("div");
    d.append(el("dt", label), el("dd", value, { id }));
    dl.append(d);
  };
  if (state.inbox) item("Open two-phase claims", state.inbox.error ? "unavailable" : state.inbox.openClaims, "open-claims");
  if (state.outbox && !state.outbox.error) {
    item("Outbox unsent rows", state.outbox.unsent, "outbox-unsent");
    item("Oldest unsent row (s)", Math.round(state.outbox.lagMs / 1000), "outbox-lag");
    item("Stale outbox rows", state.outbox.stale, "outbox-stale");
    item("Set aside", state.outbox.setAside, "outbox-set-aside");
  }
  box.append(dl);
  for (const [what, s] of [["Inbox", state.inbox], ["Outbox", state.outbox]]) {
    if (s && s.error) box.append(el("p", what + ": " + s.error, { class: "muted" }));
  }
}

function renderGroups(state) {
  const box = $("groups");
  box.replaceChildren();
  if (state.reasons.length === 0) box.append(el("p", "The dead-letter queue is empty."));
  state.reasons.forEach((group, g) => {
    const section = el("section", undefined, { class: "group", "aria-labelledby": "group-" + g });
    section.append(el("h3", group.name + " (" + n(group.count) + ")", { id: "group-" + g }));
    const show = el("button", "Show group " + group.name, { type: "button" });
    show.addEventListener("click", () => { $("f-reason").value = group.name; applyFilter(); });
    const replay = el("button", "Replay group " + group.name, { type: "button" });
    replay.addEventListener("click", () => ask("replay", { filter: { reason: group.name } }, "of reason " + group.name));
    const purge = el("button", "Purge group " + group.name, { type: "button", class: "danger" });
    purge.addEventListener("click", () => ask("purge", { filter: { reason: group.name } }, "of reason " + group.name));
    section.append(show, replay, purge);
    box.append(section);
  });
  const fill = (select, tallies) => {
    const current = select.value;
    select.replaceChildren(el("option", "any", { value: "" }), ...tallies.map((t) => el("option", t.name + " (" + n(t.count) + ")", { value: t.name })));
    select.value = tallies.some((t) => t.name === current) ? current : "";
  };
  fill($("f-reason"), state.reasons);
  fill($("f-type"), state.types);
}

function renderCounts(state) {
  $("entity").textContent = state.entity;
  $("operator").textContent = "Signed in as " + state.operator;
  showPersonal = state.showPersonal === true;
  $("set-aside-label").hidden = state.setAsideAllowed !== true;
  const q = state.queue;
  // Never "0+": capped, the peek saw the first QUEUE_COUNT_CAP messages only, and says so in words.
  $("active").textContent = q.capped ? n(q.active) + " of the first " + n(q.peeked) : n(q.active);
  $("scheduled").textContent = q.capped ? n(q.scheduled) + " of the first " + n(q.peeked) : n(q.scheduled);
  $("dead").textContent = n(state.deadLettered);
  $("counted").textContent = "Dead letters counted by a full peek at " + state.indexedAt + (q.capped ? "; the queue holds more than " + n(q.peeked) + " messages, counted up to there." : ".");
}

// The filter in force, and the selection: sequence numbers ticked on any page, or every message the filter matches.
let filter = {};
let offset = 0;
let total = 0;
let picked = new Map();
let showPersonal = false;
let allMatching = null;

function readFilter() {
  const f = {};
  const iso = (v) => (v ? new Date(v).toISOString() : "");
  for (const [key, value] of [["reason", $("f-reason").value], ["type", $("f-type").value], ["messageId", $("f-id").value.trim()], ["enqueuedFrom", iso($("f-from").value)], ["enqueuedTo", iso($("f-to").value)]])
    if (value) f[key] = value;
  return f;
}
function applyFilter() { filter = readFilter(); offset = 0; allMatching = null; showSelection(); loadPage(); }
function showSelection() {
  $("selection").textContent = allMatching
    ? "All " + n(allMatching.count) + " matching the filter selected."
    : picked.size === 0 ? "Nothing selected." : n(picked.size) + " selected (on any page).";
}

async function loadPage() {
  const params = new URLSearchParams({ ...filter, offset: String(offset), limit: String(PAGE) });
  let page;
  try { page = await api("/api/messages?" + params); }
  catch (error) { $("matching").textContent = "Could not read the list: " + error.message; return true; }
  const counting = page.total === undefined || page.total === null;
  total = counting ? 0 : page.total;
  $("matching").textContent = counting
    ? "Counting the whole dead-letter queue… (the first messages are shown meanwhile)"
    : n(page.total) + " dead letter(s) match" + (Object.keys(filter).length ? " the filter." : ".");
  const here = Math.floor(offset / PAGE) + 1;
  $("page-of").textContent = counting ? "Page " + here : "Page " + here + " of " + Math.max(1, Math.ceil(page.total / PAGE));
  $("prev").disabled = offset === 0;
  $("next").disabled = counting || offset + PAGE >= page.total;
  $("list").tBodies[0].replaceChildren(...page.messages.map(row));
  return !counting;
}

function row(m) {
  const tr = el("tr");
  const box = el("input", undefined, { type: "checkbox", value: m.sequenceNumber, "aria-label": "Select message " + m.messageId, class: "pick" });
  box.checked = allMatching !== null || picked.has(m.sequenceNumber);
  box.disabled = allMatching !== null;
  box.addEventListener("change", () => {
    if (box.checked) picked.set(m.sequenceNumber, m.messageId); else picked.delete(m.sequenceNumber);
    showSelection();
  });
  const cell = el("td");
  cell.append(box);
  tr.append(cell, el("td", m.messageId), el("td", m.inboxKey), el("td", m.reason || ""), el("td", m.type || ""), el("td", m.enqueuedTime || ""), el("td", m.deliveryCount), el("td", m.description || ""));
  const bodyCell = el("td", undefined, { class: "body" });
  const show = el("button", "Show body", { type: "button", "aria-label": "Show body of " + m.messageId });
  show.addEventListener("click", async () => {
    try {
      const found = await api("/api/body?seq=" + encodeURIComponent(m.sequenceNumber));
      const edit = el("button", "Edit and retry", { type: "button", "aria-label": "Edit and retry " + m.messageId });
      edit.addEventListener("click", () => {
        const area = el("textarea", undefined, { rows: "6", cols: "50", "aria-label": "Edited body of " + m.messageId });
        area.value = found.body;
        const send = el("button", "Check and retry", { type: "button", "aria-label": "Check and retry " + m.messageId });
        send.addEventListener("click", () => ask("edit", { sequenceNumber: m.sequenceNumber, body: area.value }, "edited: " + m.messageId));
        bodyCell.replaceChildren(area, send);
        area.focus();
      });
      const parts = [el("pre", found.body), el("pre", JSON.stringify(found.properties, null, 1), { class: "props", "aria-label": "Properties of " + m.messageId })];
      if (found.masked) {
        parts.push(el("p", "Personal fields masked.", { class: "muted" }));
        if (showPersonal) {
          const unmask = el("button", "Show unmasked", { type: "button", "aria-label": "Show unmasked body of " + m.messageId });
          unmask.addEventListener("click", async () => {
            try { const open = await api("/api/body?unmasked=1&seq=" + encodeURIComponent(m.sequenceNumber)); parts[0].textContent = open.body; unmask.replaceWith(edit); found.body = open.body; }
            catch (error) { bodyCell.append(el("span", error.message)); }
          });
          parts.push(unmask);
        }
      } else parts.push(edit);
      bodyCell.replaceChildren(...parts);
    } catch (error) { bodyCell.replaceChildren(el("span", error.message)); }
  });
  bodyCell.append(show);
  tr.append(bodyCell);
  return tr;
}

// The first page first: on a large queue it comes long before the count of every message, which follows.
async function refresh(fresh) {
  try {
    const counted = fresh ? false : await loadPage();
    const state = await api("/api/state" + (fresh ? "?fresh=1" : ""));
    renderCounts(state);
    renderDatabase(state);
    renderGroups(state);
    if (!counted) await loadPage();
  } catch (error) { say("Could not read the queue: " + error.message); }
}

let opener;
async function ask(action, selection, what) {
  opener = document.activeElement;
  let plan;
  const setAside = action !== "edit" && $("set-aside").checked;
  try { plan = await api("/api/plan", { action, ...selection, ...(setAside ? { setAside: true } : {}) }); }
  catch (error) { say(error.message); return; }
  $("confirm-title").textContent = action === "purge" ? "Purge messages for good?" : action === "edit" ? "Send the edited message?" : "Replay messages?";
  const reasons = plan.reasons.map((r) => r.name + ": " + n(r.count)).join(", ");
  $("confirm-text").textContent = (action === "edit"
    ? "The edited body passed the handler's schema. Send it as a replay of " + what.replace("edited: ", "") + "; the original is removed from the dead-letter queue."
    : action === "replay"
    ? "Send " + n(plan.count) + " message(s) " + what + " back to " + $("entity").textContent + ". Each is applied at most once: a copy carries its original's inbox key."
    : "Delete " + n(plan.count) + " message(s) " + what + " from the dead-letter queue. Each is written to the console's archive first, from which it can be restored.")
    + " By reason: " + reasons + ".";
  const items = plan.sample.map((m) => el("li", m.messageId));
  if (plan.count > plan.sample.length) items.push(el("li", "and " + n(plan.count - plan.sample.length) + " more"));
  $("confirm-list").replaceChildren(...items);
  // Irreversible, so said on its own line: a deferred dead letter is reached by its sequence number only.
  $("confirm-set-aside").textContent = plan.setAside ? plan.setAside.warning + "." : "";
  $("confirm-set-aside").hidden = !plan.setAside;
  const yes = $("confirm-yes");
  yes.textContent = action === "edit" ? "Send edited" : (action === "replay" ? "Replay " : "Purge ") + plan.count;
  yes.className = action === "purge" ? "danger" : "";
  yes.onclick = () => { $("confirm").close(); start(plan); };
  $("confirm").showModal();
  $("confirm-no").focus();
}
$("confirm-no").addEventListener("click", () => { $("confirm").close(); say("Cancelled: nothing was changed."); });
$("confirm").addEventListener("close", () => { if (opener && opener.isConnected) opener.focus(); });

function tallyText(job) {
  return Object.entries(job.counts).map(([r, c]) => n(c) + " " + r).join(", ");
}

// A console that dies or a network that drops mid-run must not look like success: the last state seen stays on the
// page with what it leaves unknown, and the page keeps asking until the console answers again.
function lost(job, error) {
  const box = $("lost");
  box.hidden = false;
  const known = job.done + " of " + job.total + " done when the console last answered";
  box.textContent = error.status === 404 || error.status === 401
    ? "The console restarted: this run's progress is gone with it (" + known + "). Its log lines (console.result) on the console's stderr say what was done; the rest are still in the dead-letter queue. Sign in again and refresh."
    : "Lost contact with the console (" + error.message + "): " + known + ". " + (job.total - job.done) + " not confirmed: they are still dead-lettered unless the console acted on them before it stopped. Retrying…";
}

async function poll(job) {
  for (let failures = 0; ; ) {
    await new Promise((r) => setTimeout(r, failures === 0 ? 250 : 1000));
    try {
      const next = await api("/api/jobs/" + job.id);
      $("lost").hidden = true;
      return next;
    } catch (error) {
      lost(job, error);
      if (error.status === 404 || error.status === 401) return undefined;
      failures += 1;
    }
  }
}

async function start(plan) {
  let job;
  try { job = await api("/api/run", { token: plan.token }); }
  catch (error) { say(error.message); return; }
  const bar = $("bar");
  bar.hidden = false;
  bar.max = job.total;
  // Announced at the start and at each tenth, not at every poll: a screen reader reads every change of the region.
  let announced = -1;
  for (;;) {
    bar.value = job.done;
    const step = Math.floor((10 * job.done) / Math.max(job.total, 1));
    if (step !== announced) {
      announced = step;
      say((job.action === "purge" ? "Purging" : "Replaying") + ": " + job.done + " of " + job.total);
    }
    if (job.state !== "running") break;
    const next = await poll(job);
    if (!next) { say((job.action === "replay" ? "Replay" : "Purge") + " interrupted: " + job.done + " of " + job.total + " confirmed done; the console is gone."); return; }
    job = next;
  }
  finish(job);
  picked = new Map();
  allMatching = null;
  showSelection();
  await refresh(true);
  // The button that started it may be gone with its group: focus goes to the result, not to <body>.
  $("progress").focus();
}

function finish(job) {
  const verb = job.action === "purge" ? "Purged" : "Replayed";
  const done = verb + " " + job.done + " of " + job.total;
  say(job.state === "done"
    ? done + " message(s)."
    : job.state === "partial"
      ? done + "; not done: " + tallyText(job) + "."
      : job.state === "stopped"
        ? done + ", then the console was stopped: " + tallyText(job) + "."
        : done + ", then failed: " + job.error + " (" + tallyText(job) + ").");
  const table = $("results");
  table.hidden = false;
  const rows = job.results.map((r) => {
    const tr = el("tr");
    tr.append(el("td", r.messageId), el("td", r.result), el("td", r.copyMessageId ? "copy " + r.copyMessageId : r.why || ""));
    return tr;
  });
  if (job.moreResults > 0) rows.push(el("tr", "and " + n(job.moreResults) + " more (the console's log has every one)"));
  if (job.archive) rows.push(el("tr", "Archived to " + job.archive));
  if (job.throttled) rows.push(el("tr", "Throttled by Service Bus (ServerBusy) and retried: " + job.throttled));
  table.tBodies[0].replaceChildren(...rows);
}

function selection() {
  if (allMatching) return { selection: { filter: allMatching.filter }, what: "matching the filter" };
  if (picked.size === 0) return undefined;
  return { selection: { sequenceNumbers: [...picked.keys()] }, what: "selected" };
}
for (const [id, action] of [["replay-selected", "replay"], ["purge-selected", "purge"]])
  $(id).addEventListener("click", () => {
    const s = selection();
    if (!s) say("Select one or more messages first."); else ask(action, s.selection, s.what);
  });
$("select-all").addEventListener("click", () => {
  if (Object.keys(filter).length === 0) { say("Filter first (a reason, a type, a time, a MessageId): a write never means everything by omission."); return; }
  allMatching = { filter, count: total };
  showSelection();
  loadPage();
});
$("select-none").addEventListener("click", () => { picked = new Map(); allMatching = null; showSelection(); loadPage(); });
$("f-apply").addEventListener("click", applyFilter);
$("f-clear").addEventListener("click", () => { for (const id of ["f-reason", "f-type", "f-id", "f-from", "f-to"]) $(id).value = ""; applyFilter(); });
$("prev").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); loadPage(); });
$("next").addEventListener("click", () => { if (offset + PAGE < total) { offset += PAGE; loadPage(); } });
$("refresh").addEventListener("click", () => refresh(true));
// Sign-out ends the session on the console: this page's token and cookie are worthless after it.
$("sign-out").addEventListener("click", async () => {
  try { await api("/api/sign-out", {}); }
  catch (error) { say("Sign-out failed: " + error.message); return; }
  document.querySelector("main").replaceChildren(el("p", "Signed out. Open a new sign-in link from the console to come back."));
});
refresh(false);`;
