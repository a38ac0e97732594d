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
  body { font: 15px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1b1b1b; max-width: 72rem; }
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
</style>
</head>
<body>
<header>
  <h1>sbinbox console: <span id="entity">…</span></h1>
  <p class="muted">Reads peek at the dead-letter queue and lock nothing. A replay or purge asks first, then runs through the same code as <code>sbinbox dlq</code>.</p>
</header>
<main>
  <section aria-labelledby="counts-heading">
    <h2 id="counts-heading">Counts</h2>
    <dl class="counts">
      <div><dt>Active messages</dt><dd id="active">…</dd></div>
      <div><dt>Scheduled</dt><dd id="scheduled">…</dd></div>
      <div><dt>Dead-lettered</dt><dd id="dead">…</dd></div>
    </dl>
    <button type="button" id="refresh">Refresh</button>
  </section>
  <section aria-labelledby="db-heading">
    <h2 id="db-heading">Inbox and outbox</h2>
    <div id="database"><p class="muted">…</p></div>
  </section>
  <section aria-labelledby="dlq-heading">
    <h2 id="dlq-heading">Dead-letter queue by reason</h2>
    <div id="groups"></div>
    <div>
      <button type="button" id="replay-selected">Replay selected</button>
      <button type="button" id="purge-selected" class="danger">Purge selected</button>
    </div>
  </section>
  <section aria-labelledby="progress-heading">
    <h2 id="progress-heading">Progress and results</h2>
    <div id="progress" role="status" aria-live="polite" tabindex="-1"></div>
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
  <ul id="confirm-list"></ul>
  <button type="button" id="confirm-yes"></button>
  <button type="button" id="confirm-no">Cancel</button>
</dialog>
<script nonce="${nonce}">
"use strict";
const token = document.querySelector('meta[name="sbinbox-token"]').content;
const $ = (id) => document.getElementById(id);
const el = (tag, text, attrs = {}) => {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};
async function api(path, body) {
  const init = { headers: { "x-sbinbox-token": token } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  const value = await res.json();
  if (!res.ok) throw new Error(value.error || res.statusText);
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
  if (state.groups.length === 0) box.append(el("p", "The dead-letter queue is empty."));
  state.groups.forEach((group, g) => {
    const section = el("section", undefined, { class: "group", "aria-labelledby": "group-" + g });
    section.append(el("h3", group.reason + " (" + group.messages.length + ")", { id: "group-" + g }));
    const replay = el("button", "Replay group " + group.reason, { type: "button" });
    replay.addEventListener("click", () => ask("replay", { reason: group.reason }));
    const purge = el("button", "Purge group " + group.reason, { type: "button", class: "danger" });
    purge.addEventListener("click", () => ask("purge", { reason: group.reason }));
    section.append(replay, purge);
    const table = el("table");
    const head = el("tr");
    for (const h of ["Select", "MessageId", "Inbox key", "Enqueued", "Deliveries", "Description", "Body"])
      head.append(el("th", h, { scope: "col" }));
    const thead = el("thead");
    thead.append(head);
    table.append(thead);
    const body = el("tbody");
    for (const m of group.messages) {
      const tr = el("tr");
      const box = el("input", undefined, { type: "checkbox", value: m.sequenceNumber, "aria-label": "Select message " + m.messageId, class: "pick" });
      const cell = el("td");
      cell.append(box);
      tr.append(cell, el("td", m.messageId), el("td", m.inboxKey), el("td", m.enqueuedTime || ""), el("td", m.deliveryCount), el("td", m.description || ""));
      const bodyCell = el("td");
      const show = el("button", "Show body", { type: "button", "aria-label": "Show body of " + m.messageId });
      show.addEventListener("click", async () => {
        try {
          const { body: text } = await api("/api/body?seq=" + encodeURIComponent(m.sequenceNumber));
          bodyCell.replaceChildren(el("pre", text));
        } catch (error) { bodyCell.replaceChildren(el("span", error.message)); }
      });
      bodyCell.append(show);
      tr.append(bodyCell);
      body.append(tr);
    }
    table.append(body);
    section.append(table);
    box.append(section);
  });
}

async function refresh() {
  try {
    const state = await api("/api/state");
    $("entity").textContent = state.entity;
    $("active").textContent = state.active + (state.capped ? "+" : "");
    $("scheduled").textContent = state.scheduled + (state.capped ? "+" : "");
    $("dead").textContent = state.deadLettered + (state.capped ? "+" : "");
    renderDatabase(state);
    renderGroups(state);
  } catch (error) { say("Could not read the queue: " + error.message); }
}

let opener;
async function ask(action, selection) {
  opener = document.activeElement;
  let plan;
  try { plan = await api("/api/plan", { action, ...selection }); }
  catch (error) { say(error.message); return; }
  const what = selection.reason ? "of reason " + selection.reason : "selected";
  $("confirm-title").textContent = action === "replay" ? "Replay messages?" : "Purge messages for good?";
  $("confirm-text").textContent = action === "replay"
    ? "Send " + plan.messages.length + " message(s) " + what + " back to " + $("entity").textContent + ". Each is applied at most once: a copy carries its original's inbox key."
    : "Delete " + plan.messages.length + " message(s) " + what + " from the dead-letter queue. They cannot be recovered.";
  if (plan.capped) $("confirm-text").textContent += " These are the first " + plan.messages.length + " found; more exist: run it again afterwards.";
  $("confirm-list").replaceChildren(...plan.messages.map((m) => el("li", m.messageId)));
  const yes = $("confirm-yes");
  yes.textContent = action === "replay" ? "Replay " + plan.messages.length : "Purge " + plan.messages.length;
  yes.className = action === "purge" ? "danger" : "";
  yes.onclick = () => { $("confirm").close(); start(plan); };
  $("confirm").showModal();
  $("confirm-no").focus();
}
$("confirm-no").addEventListener("click", () => { $("confirm").close(); say("Cancelled: nothing was changed."); });
$("confirm").addEventListener("close", () => { if (opener) opener.focus(); });

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
      say((job.action === "replay" ? "Replaying" : "Purging") + ": " + job.done + " of " + job.total);
    }
    if (job.state !== "running") break;
    await new Promise((r) => setTimeout(r, 250));
    job = await api("/api/jobs/" + job.id);
  }
  const verb = job.action === "replay" ? "Replayed" : "Purged";
  say(job.state === "done"
    ? verb + " " + job.done + " of " + job.total + " message(s)."
    : job.state === "partial"
      ? verb + " " + job.done + " of " + job.total + "; the others are still dead-lettered: run again."
      : verb + " " + job.done + " of " + job.total + ", then failed: " + job.error);
  const table = $("results");
  table.hidden = false;
  table.tBodies[0].replaceChildren(...job.results.map((r) => {
    const tr = el("tr");
    tr.append(el("td", r.messageId), el("td", r.result), el("td", r.copyMessageId ? "copy " + r.copyMessageId : r.why || ""));
    return tr;
  }));
  await refresh();
  // The button that started it may be gone with its group: focus goes to the result, not to <body>.
  $("progress").focus();
}

function selected() {
  return [...document.querySelectorAll("input.pick:checked")].map((b) => b.value);
}
$("replay-selected").addEventListener("click", () => {
  const s = selected();
  if (s.length === 0) say("Select one or more messages first."); else ask("replay", { sequenceNumbers: s });
});
$("purge-selected").addEventListener("click", () => {
  const s = selected();
  if (s.length === 0) say("Select one or more messages first."); else ask("purge", { sequenceNumbers: s });
});
$("refresh").addEventListener("click", refresh);
refresh();
</script>
</body>
</html>
`;
}
