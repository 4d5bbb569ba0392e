// The atf dashboard: a Preact app (htm templates, no build step) over the v1 API of its own
// origin. Every view polls what it shows every few seconds, so it stays live without a reload.
import { html, render, useState, useEffect, useCallback } from './vendor/htm-preact-3.1.1.module.js';

const POLL_MS = 3000;
const STATUSES = ['pending', 'new', 'enqueued', 'processing', 'retriable_failure', 'success',
  'fatal_failure', 'dead', 'cancelled', 'dropped', 'upstream_failed'];
const WAITING = ['pending', 'new', 'enqueued', 'retriable_failure'];
const FAILED = ['dead', 'fatal_failure'];
const TOKEN_KEY = 'atf-token';
const LIMITS = ['max_running', 'key_concurrency', 'rate', 'key_rate']; // as the registry names them

// --- the API -------------------------------------------------------------------------------

class NeedToken extends Error {}
let onNeedToken = () => {};

async function api(path, { method = 'GET', body } = {}) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = 'Bearer ' + token;
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401) { onNeedToken(); throw new NeedToken('this atf needs its token'); }
  const j = r.status === 204 ? null : await r.json().catch(() => null);
  if (!r.ok) throw new Error((j && j.error && j.error.message) || r.status + ' ' + r.statusText);
  return j;
}
const enc = encodeURIComponent;
const taskPath = (lambda, id) => `/v1/lambdas/${enc(lambda)}/tasks/${enc(id)}`;
const query = (params) => new URLSearchParams(Object.entries(params).filter(([, v]) => v)).toString();

// usePoll runs load now and every POLL_MS while the view is shown, and again when deps change or
// reload is called (after an action). It keeps the last answer while the next one is on its way.
function usePoll(load, deps) {
  const [state, setState] = useState({ data: null, error: null });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    const run = () => load().then((data) => live && setState({ data, error: null }),
      (e) => live && setState((s) => ({ data: s.data, error: e.message })));
    run();
    const timer = setInterval(run, POLL_MS);
    return () => { live = false; clearInterval(timer); };
  }, [...deps, tick]);
  return [state.data, state.error, useCallback(() => setTick((t) => t + 1), [])];
}

// act runs an action of a button and tells how it went.
function useAction(reload) {
  const [msg, setMsg] = useState(null);
  const run = async (label, fn) => {
    try { const out = await fn(); setMsg({ ok: true, text: label + (out ? ': ' + out : '') }); }
    catch (e) { setMsg({ ok: false, text: label + ' failed: ' + e.message }); }
    reload();
  };
  const view = msg && html`<p class=${msg.ok ? 'notice' : 'error'} role="status">${msg.text}</p>`;
  return [run, view];
}

// --- routing: #/page?query ------------------------------------------------------------------

function parseHash() {
  const [path, q] = (location.hash.slice(1) || '/lambdas').split('?');
  return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), params: Object.fromEntries(new URLSearchParams(q || '')) };
}
const go = (path, params = {}) => { const q = query(params); location.hash = path + (q ? '?' + q : ''); };

// --- small pieces ---------------------------------------------------------------------------

const Status = ({ s }) => html`<span class="status ${s}" data-status=${s}>${s}</span>`;
// heldBy says which paused gate holds a task that waits to run (the API's held_by), and where
// to open it.
const heldBy = (g) => `held by the paused gate of ${g.collection ? 'collection ' + g.collection + ' of ' : 'lambda '}${g.lambda}`;
const Held = ({ t }) => t.held_by && html` <a class="held" href="#/lambdas" data-held-by=${t.held_by.collection || t.held_by.lambda}
  title="open the gate on the Lambdas page">${heldBy(t.held_by)}</a>`;
// The API's times carry nanoseconds in UTC; the page shows them in this browser's zone, with
// their date and zone, to the second (to the millisecond with ms), and the API's value on hover.
const pad = (n, w = 2) => String(n).padStart(w, '0');
function formatTime(t, ms) {
  const d = new Date(t);
  if (isNaN(d)) return String(t);
  const off = -d.getTimezoneOffset(), abs = Math.abs(off);
  const zone = 'UTC' + (off ? (off < 0 ? '-' : '+') + pad(Math.floor(abs / 60)) + ':' + pad(abs % 60) : '');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
    + (ms ? '.' + pad(d.getMilliseconds(), 3) : '') + ' ' + zone;
}
const When = ({ t, ms }) => (t ? html`<time datetime=${t} title=${t}>${formatTime(t, ms)}</time>` : '');
const firstLine = (s) => (s || '').split('\n')[0].slice(0, 120);
const Err = ({ error }) => error && html`<p class="error">${error}</p>`;

function useLambdas() {
  return usePoll(() => api('/v1/lambdas').then((r) => r.lambdas), []);
}

function LambdaSelect({ value, onChange, lambdas, any }) {
  return html`<select name="lambda" value=${value} onChange=${(e) => onChange(e.target.value)}>
    ${any && html`<option value="">every lambda</option>`}
    ${(lambdas || []).map((l) => html`<option value=${l.name}>${l.name}</option>`)}</select>`;
}

// --- Lambdas --------------------------------------------------------------------------------

// usd writes a small amount of dollars to two significant digits: $0.0000069.
const usd = (v) => '$' + (v >= 0.01 || v === 0 ? v.toFixed(2) : v.toFixed(Math.min(20, 1 - Math.floor(Math.log10(v)))));

function Lambdas() {
  const [lambdas, error, reload] = useLambdas();
  const [costs, costsError] = usePoll(() => api('/v1/dashboard/costs'), []);
  const costOf = (name) => costs && costs.lambdas.find((c) => c.lambda === name);
  const [limits, limitsError] = usePoll(() => api('/v1/dashboard/limits'), []);
  const limitsOf = (name) => limits && limits.lambdas.find((c) => c.lambda === name);
  const [act, notice] = useAction(reload);
  const setGate = (lambda, mode, collection) => {
    if (mode === 'drop' && !confirm(`Drop the waiting tasks of ${lambda}${collection ? '/' + collection : ''}?`)) return;
    act(`gate ${lambda}${collection ? '/' + collection : ''} ${mode}`, () =>
      api(`/v1/lambdas/${enc(lambda)}/gate`, { method: 'PUT', body: { mode, collection: collection || undefined } }).then(() => ''));
  };
  return html`<section><h2>Lambdas</h2><${Err} error=${error} />${notice}
    <table id="lambdas"><thead><tr><th>lambda</th><th>gate</th>
      ${STATUSES.map((s) => html`<th class="num">${s.replace('_', ' ')}</th>`)}<th>waiting by priority</th>
      <th>limits</th><th class="num">on AWS, today</th></tr></thead>
    <tbody>${(lambdas || []).map((l) => html`<${LambdaRow} l=${l} setGate=${setGate} cost=${costOf(l.name)} costsError=${costsError}
      limits=${limitsOf(l.name)} limitsError=${limitsError} />`)}</tbody></table>
    <p class="muted">Queued: the <em>enqueued</em> column, tasks sent to their queue and not claimed yet.
      Waiting by priority counts the first page of waiting tasks (200; "+" when there are more).</p>
    <p class="muted" id="limits-note">Limits: the lambda's limits of the registry, counted across every worker
      (max_running, key_concurrency, rate, key_rate), and the starts each held back since midnight UTC (GET /v1/dashboard/limits):
      a held task waits, with no attempt counted, and starts when the limit lets it. Keys shows its tasks by key.</p>
    <p class="muted" id="costs-note">On AWS, today: what the DynamoDB store of a deployed stack would be billed, on demand,
      for the transitions this atf dev wrote for the lambda since midnight UTC (GET /v1/dashboard/costs): the units per transition
      of docs/capacity.md at the list prices ${costs ? 'checked ' + costs.prices_checked : ''} that <code>make bench</code> uses.
      DynamoDB is most of a task's bill; heartbeats, sweeps, queues and functions are not in it.</p></section>`;
}

// LimitsCell shows a lambda's limits and the starts each held back today.
function LimitsCell({ lambda, limits, error }) {
  if (!limits) return html`<span class="muted" title=${error || ''}>—</span>`;
  const set = LIMITS.filter((n) => limits.limits[n]);
  const held = LIMITS.filter((n) => limits.held[n]);
  return html`${set.length ? set.map((n) => html`<div data-limit=${n}>${n} ${limits.limits[n]}</div>`)
      : html`<span class="muted">none</span>`}
    ${held.map((n) => html`<div class="held" data-held=${n}>${limits.held[n]} ${limits.held[n] === 1 ? 'start' : 'starts'} held by ${n} today</div>`)}
    ${set.length > 0 && !held.length && html`<div class="muted" data-held="">no start held today</div>`}
    <div><a href="#/keys?lambda=${enc(lambda)}">keys</a></div>`;
}

function LambdaRow({ l, setGate, cost, costsError, limits, limitsError }) {
  const lambdaGate = (l.gates.find((g) => !g.collection) || { mode: 'open' }).mode;
  const collections = l.gates.filter((g) => g.collection);
  const [byPriority] = usePoll(async () => {
    const page = await api(`/v1/lambdas/${enc(l.name)}/tasks?` + query({ status: WAITING.join(','), limit: 200 }));
    const n = {};
    for (const t of page.tasks) n[t.priority] = (n[t.priority] || 0) + 1;
    return { n, more: !!page.next_cursor };
  }, [l.name]);
  const [collection, setCollection] = useState('');
  return html`<tr data-lambda=${l.name}>
    <td><a href="#/tasks?lambda=${enc(l.name)}">${l.name}</a></td>
    <td><span class="status ${lambdaGate}" data-gate=${lambdaGate}>${lambdaGate}</span>
      ${['open', 'pause', 'drop'].map((m) => html` <button class=${lambdaGate === m ? 'on' : ''} data-mode=${m}
        onClick=${() => setGate(l.name, m)}>${m}</button>`)}
      ${collections.map((g) => html`<div data-collection=${g.collection}>${g.collection}: <span class="status ${g.mode}">${g.mode}</span>
        <button onClick=${() => setGate(l.name, 'open', g.collection)}>open</button></div>`)}
      <form class="inline" onSubmit=${(e) => { e.preventDefault(); if (collection) setGate(l.name, e.submitter?.value || 'pause', collection); }}>
        <input placeholder="collection" size="10" value=${collection} onInput=${(e) => setCollection(e.target.value)} />
        <button value="pause">pause</button><button value="drop">drop</button></form></td>
    ${STATUSES.map((s) => html`<td class="num" data-count=${s}>${l.counts[s]
      ? html`<a href="#/tasks?lambda=${enc(l.name)}&status=${s}">${l.counts[s]}</a>` : html`<span class="muted">0</span>`}</td>`)}
    <td>${byPriority && l.priorities.map((p) => html`<span data-priority=${p}>${p} ${byPriority.n[p] || 0}${byPriority.more ? '+' : ''} </span>`)}</td>
    <td data-limits><${LimitsCell} lambda=${l.name} limits=${limits} error=${limitsError} /></td>
    <td class="num" data-cost>${cost ? html`<span title=${`${cost.write_units} WRU and ${cost.read_units} RRU in ${cost.transitions} transitions`}>${usd(cost.usd)}</span>`
      : html`<span class="muted" title=${costsError || ''}>—</span>`}</td>
  </tr>`;
}

// --- Keys: a lambda's tasks by key ----------------------------------------------------------

function Keys({ params }) {
  const [lambdas] = useLambdas();
  const lambda = params.lambda || (lambdas && lambdas[0] && lambdas[0].name) || '';
  const [keys, error] = usePoll(() => lambda ? api('/v1/dashboard/keys?' + query({ lambda })) : Promise.resolve(null), [lambda]);
  return html`<section id="keys"><h2>Keys</h2>
    <form class="inline"><${LambdaSelect} value=${lambda} lambdas=${lambdas} onChange=${(v) => go('/keys', { lambda: v })} /></form>
    <${Err} error=${error} />
    ${keys && html`<div class="charts"><${KeyCounts} id="keys-waiting" title="Waiting" what="waiting" c=${keys.waiting} />
      <${KeyCounts} id="keys-running" title="Running" what="running" c=${keys.running} /></div>`}
    <p class="muted">The keys (a task's tenant, --key) with the most tasks, waiting (${WAITING.join(', ')}) and running
      (claimed, processing), from one read of the lambda's list per column (GET /v1/dashboard/keys): at most the first 500
      tasks in creation order, so a large backlog costs no more to show.</p></section>`;
}

// KeyCounts is one column of Keys: its top keys, and of how many tasks they were counted.
function KeyCounts({ id, title, what, c }) {
  const tasks = `${c.read} ${what} task${c.read === 1 ? '' : 's'}`;
  const of = c.complete ? `of all ${tasks}` : `of the first ${tasks} read (the list goes on past them)`;
  return html`<div id=${id}><h3>${title}</h3><p class="muted" data-of>${c.top.length < c.keys ? `top ${c.top.length} of ${c.keys} keys, ` : ''}${of}</p>
    ${c.top.length ? html`<table><thead><tr><th>key</th><th class="num">tasks</th></tr></thead>
      <tbody>${c.top.map((k) => html`<tr data-key=${k.key}><td>${k.key || html`<span class="muted">(no key)</span>`}</td>
        <td class="num">${k.tasks}</td></tr>`)}</tbody></table>` : html`<p class="muted">No ${what} tasks.</p>`}</div>`;
}

// --- Tasks ----------------------------------------------------------------------------------

function Tasks({ params }) {
  const [lambdas] = useLambdas();
  const lambda = params.lambda || (lambdas && lambdas[0] && lambdas[0].name) || '';
  const [form, setForm] = useState(params);
  useEffect(() => setForm(params), [JSON.stringify(params)]);
  const [cursors, setCursors] = useState(['']); // the cursors of the pages seen, to page back
  const cursor = cursors[cursors.length - 1];
  useEffect(() => setCursors(['']), [lambda, params.status, params.collection]);
  const [page, error, reload] = usePoll(() => !lambda ? Promise.resolve(null)
    : api(`/v1/lambdas/${enc(lambda)}/tasks?` + query({ status: params.status, collection: params.collection, cursor, limit: 50 })),
  [lambda, params.status, params.collection, cursor]);
  const [act, notice] = useAction(reload);
  const submit = (e) => {
    e.preventDefault();
    const l = form.lambda || lambda;
    if (form.id) go(`/task/${enc(l)}/${enc(form.id)}`);
    else go('/tasks', { lambda: l, status: form.status, collection: form.collection });
  };
  return html`<section><h2>Tasks</h2>
    <form class="inline" id="task-search" onSubmit=${submit}>
      <${LambdaSelect} value=${form.lambda || lambda} lambdas=${lambdas} onChange=${(v) => setForm({ ...form, lambda: v })} />
      <select name="status" value=${form.status || ''} onChange=${(e) => setForm({ ...form, status: e.target.value })}>
        <option value="">any status</option>
        <option value=${FAILED.join(',')}>failed for good (dead, fatal_failure)</option>
        ${STATUSES.map((s) => html`<option value=${s}>${s}</option>`)}</select>
      <input name="collection" placeholder="collection" value=${form.collection || ''} onInput=${(e) => setForm({ ...form, collection: e.target.value })} />
      <input name="id" placeholder="task id" value=${form.id || ''} onInput=${(e) => setForm({ ...form, id: e.target.value })} />
      <button>search</button></form>
    <${Err} error=${error} />${notice}
    <${TaskTable} tasks=${page && page.tasks} act=${act} />
    <p>${cursors.length > 1 && html`<button onClick=${() => setCursors(cursors.slice(0, -1))}>previous page</button> `}
      ${page && page.next_cursor && html`<button onClick=${() => setCursors([...cursors, page.next_cursor])}>next page</button>`}
      <span class="muted"> A page reads a bounded part of the lambda's tasks: a filtered page may hold few tasks and still have a next one.</span></p>
  </section>`;
}

function TaskActions({ t, act }) {
  const running = WAITING.includes(t.status) || t.status === 'processing';
  return html`${running && !t.cancel_requested && html`<button class="danger" data-action="cancel"
      onClick=${() => act(`cancel ${t.id}`, () => api(taskPath(t.lambda, t.id) + '/cancel', { method: 'POST' }).then((r) => r.status))}>cancel</button>`}
    ${t.cancel_requested && html`<span class="muted">cancel requested</span>`}
    ${FAILED.includes(t.status) && html`<button data-action="redrive"
      onClick=${() => act(`redrive ${t.id}`, () => api(taskPath(t.lambda, t.id) + '/redrive', { method: 'POST' }).then((r) => r.status))}>redrive</button>`}`;
}

// TaskTable lists tasks; withLambda adds their lambda, for a list of several lambdas' tasks.
function TaskTable({ tasks, act, withLambda }) {
  if (!tasks) return null;
  if (!tasks.length) return html`<p class="muted">No tasks on this page.</p>`;
  return html`<table class="tasks"><thead><tr>${withLambda && html`<th>lambda</th>`}<th>id</th><th>status</th><th>priority</th><th>collection</th>
    <th class="num">attempts</th><th>run at</th><th>updated</th><th>error</th><th></th></tr></thead>
    <tbody>${tasks.map((t) => html`<tr data-task=${t.id} data-lambda=${t.lambda}>${withLambda && html`<td>${t.lambda}</td>`}
      <td><a href="#/task/${enc(t.lambda)}/${enc(t.id)}">${t.id}</a></td><td><${Status} s=${t.status} /><${Held} t=${t} /></td>
      <td>${t.priority}</td><td>${t.collection}</td><td class="num">${t.attempts}/${t.max_attempts}</td>
      <td><${When} t=${t.run_at} /></td><td><${When} t=${t.updated_at} /></td><td class="err">${firstLine(t.error)}</td>
      <td><${TaskActions} t=${t} act=${act} /></td></tr>`)}</tbody></table>`;
}

const json = (v) => JSON.stringify(v, null, 2);

// AttemptLogs shows the log of each attempt that kept one (atf dev keeps the last 16 KiB of its
// handler's standard error), or where it is in CloudWatch Logs (on AWS), the latest open.
function AttemptLogs({ attempts }) {
  const logged = attempts.filter((a) => a.log || a.log_location);
  if (!logged.length) return html`<p class="muted">No attempt kept a log (atf dev keeps each attempt's standard error; on AWS the logs are in CloudWatch).</p>`;
  const where = (l) => html`<p class="log-location">In CloudWatch Logs: log group <code>${l.log_group}</code>, stream <code>${l.log_stream}</code>
    ${l.request_id && html`, request id <code>${l.request_id}</code>`} (<code>atf logs</code> prints a Logs Insights query).</p>`;
  return logged.map((a, i) => html`<details class="log" data-attempt-log=${a.attempt} open=${i === logged.length - 1}>
    <summary>attempt ${a.attempt} (${a.outcome})</summary>${a.log ? html`<pre>${a.log}</pre>` : where(a.log_location)}</details>`);
}

function TaskDetail({ lambda, id }) {
  const [t, error, reload] = usePoll(() => api(taskPath(lambda, id)), [lambda, id]);
  const [downs] = usePoll(() => api(taskPath(lambda, id) + '/downstreams?limit=50'), [lambda, id]);
  const [hist] = usePoll(() => api(taskPath(lambda, id) + '/attempts'), [lambda, id]);
  const [ups] = usePoll(async () => {
    const after = ((t && t.after) || []).slice(0, 20); // the first 20 upstreams, a GET each
    return Promise.all(after.map((r) => api(taskPath(r.lambda, r.id)).then((u) => u, () => ({ ...r, status: '?' }))));
  }, [t && JSON.stringify(t.after)]);
  const [act, notice] = useAction(reload);
  const ref = (r) => html`<li><a href="#/task/${enc(r.lambda)}/${enc(r.id)}">${r.lambda}/${r.id}</a> <${Status} s=${r.status} /></li>`;
  return html`<section id="task-detail"><h2>${lambda}/${id} ${t && html`<${Status} s=${t.status} />`}</h2>
    <${Err} error=${error} />${notice}
    ${t && t.held_by && html`<p class="held" id="held-by">This task is ${heldBy(t.held_by)}: it runs once the gate opens
      (<a href="#/lambdas">Lambdas</a>).</p>`}
    ${t && html`<p><${TaskActions} t=${t} act=${act} /></p>
    <dl><dt>attempts</dt><dd>${t.attempts} of ${t.max_attempts}</dd>
      <dt>priority</dt><dd>${t.priority}</dd><dt>collection</dt><dd>${t.collection || '—'}</dd>
      <dt>created</dt><dd><${When} ms t=${t.created_at} /></dd><dt>run at</dt><dd><${When} ms t=${t.run_at} /></dd>
      <dt>updated</dt><dd><${When} ms t=${t.updated_at} /></dd>
      <dt>next trigger</dt><dd>${t.next_trigger_at ? html`<${When} ms t=${t.next_trigger_at} />` : '— (terminal)'}</dd>
      ${t.deadline && html`<dt>deadline</dt><dd><${When} ms t=${t.deadline} /></dd>`}<dt>version</dt><dd>${t.version}</dd></dl>
    <h3>Attempts</h3>${hist && html`${hist.attempts_dropped > 0 && html`<p class="muted">${hist.attempts_dropped} earlier attempt(s) not kept</p>`}
      ${hist.attempts.length ? html`<table id="attempts"><thead><tr><th class="num">#</th><th>started</th><th class="num">ms</th><th>outcome</th><th>worker</th><th>error</th></tr></thead>
        <tbody>${hist.attempts.map((a) => html`<tr data-attempt=${a.attempt}><td class="num">${a.attempt}</td><td><${When} t=${a.started_at} /></td><td class="num">${a.duration_ms}</td>
          <td>${a.outcome}</td><td>${a.worker}</td><td class="error">${a.error}</td></tr>`)}</tbody></table>`
      : html`<p class="muted">No attempt has ended yet.</p>`}
      ${hist.attempts.length > 0 && html`<h3>Logs</h3><div id="attempt-logs"><${AttemptLogs} attempts=${hist.attempts} /></div>`}`}
    <h3>Error</h3>${t.error ? html`<pre class="error">${t.error}</pre>` : html`<p class="muted">none</p>`}
    <h3>Result</h3>${t.result != null ? html`<pre>${json(t.result)}</pre>` : html`<p class="muted">none</p>`}
    <h3>Payload</h3>${t.payload != null ? html`<pre>${json(t.payload)}</pre>` : html`<p class="muted">none</p>`}
    <h3>Graph</h3><p>upstreams (it waits for them${t.trigger_rule ? ', ' + t.trigger_rule : ''}):</p>
    <ul id="upstreams">${(ups || []).map(ref)}${!(t.after || []).length && html`<li class="muted">none</li>`}
      ${(t.after || []).length > 20 && html`<li class="muted">… ${t.after.length - 20} more</li>`}</ul>
    <p>downstreams (they wait for it):</p>
    <ul id="downstreams">${downs && downs.downstreams.map(ref)}${downs && !downs.downstreams.length && html`<li class="muted">none</li>`}
      ${downs && downs.next_cursor && html`<li class="muted">… more</li>`}</ul>`}
  </section>`;
}

// --- Failed: the dead letters of every lambda -------------------------------------------------

function Failed({ params }) {
  const status = params.status || '';
  const [cursors, setCursors] = useState(['']); // the cursors of the pages seen, to page back
  const cursor = cursors[cursors.length - 1];
  useEffect(() => setCursors(['']), [status]);
  const [page, error, reload] = usePoll(() => api('/v1/tasks?' + query({ status, cursor, limit: 50 })), [status, cursor]);
  const [act, notice] = useAction(reload);
  return html`<section id="failed"><h2>Failed tasks</h2>
    <p class="muted">The tasks of every lambda that failed for good, the latest first: each may be redriven, to run again.</p>
    <form class="inline" id="failed-filter" onSubmit=${(e) => e.preventDefault()}>
      <select name="status" value=${status} onChange=${(e) => go('/failed', { status: e.target.value })}>
        <option value="">dead and fatal_failure</option>${FAILED.map((s) => html`<option value=${s}>${s}</option>`)}</select></form>
    <${Err} error=${error} />${notice}
    <${TaskTable} tasks=${page && page.tasks} act=${act} withLambda />
    <p>${cursors.length > 1 && html`<button onClick=${() => setCursors(cursors.slice(0, -1))}>previous page</button> `}
      ${page && page.next_cursor && html`<button onClick=${() => setCursors([...cursors, page.next_cursor])}>next page</button>`}</p>
  </section>`;
}

// --- Operations -----------------------------------------------------------------------------

function Operations({ params }) {
  const [lambdas] = useLambdas();
  const lambda = params.lambda || (lambdas && lambdas[0] && lambdas[0].name) || '';
  const base = `/v1/lambdas/${enc(lambda)}`;
  const [schedules, sError, reloadS] = usePoll(() => lambda ? api(base + '/schedules?limit=100') : Promise.resolve(null), [lambda]);
  const [dead, dError, reloadD] = usePoll(() => lambda ? api(base + '/tasks?' + query({ status: FAILED.join(','), limit: 50 })) : Promise.resolve(null), [lambda]);
  const [act, notice] = useAction(() => { reloadS(); reloadD(); });
  const [cancel, setCancel] = useState({ collection: '', status: '' });
  const counts = (r) => Object.entries(r).filter(([k]) => k !== 'skips').map(([k, v]) => `${k} ${v === '' ? '—' : v}`).join(', ');
  const bulkCancel = (e) => {
    e.preventDefault();
    if (!confirm(`Cancel a page of ${lambda}'s tasks matching ${JSON.stringify(cancel)}?`)) return;
    act('bulk cancel', () => api(base + '/tasks/cancel', { method: 'POST', body: { collection: cancel.collection || undefined, status: cancel.status || undefined } }).then(counts));
  };
  return html`<section><h2>Operations</h2>
    <form class="inline"><${LambdaSelect} value=${lambda} lambdas=${lambdas} onChange=${(v) => go('/ops', { lambda: v })} /></form>${notice}
    <h3>Schedules</h3><${Err} error=${sError} />
    ${schedules && (schedules.schedules.length ? html`<table id="schedules"><thead><tr><th>id</th><th>when</th><th>state</th><th>next fire</th><th></th></tr></thead>
      <tbody>${schedules.schedules.map((s) => html`<${ScheduleRow} s=${s} base=${base} act=${act} />`)}</tbody></table>` : html`<p class="muted">No schedules.</p>`)}
    <h3>Dead letters</h3><${Err} error=${dError} />
    <p><button id="redrive-page" onClick=${() => act('redrive a page', () => api(base + '/tasks/redrive', { method: 'POST', body: { limit: 100 } }).then(counts))}>redrive a page (100)</button></p>
    <div id="dead-letters"><${TaskTable} tasks=${dead && dead.tasks} act=${act} /></div>
    <h3>Bulk cancel</h3>
    <form class="inline" id="bulk-cancel" onSubmit=${bulkCancel}>
      <input placeholder="collection" value=${cancel.collection} onInput=${(e) => setCancel({ ...cancel, collection: e.target.value })} />
      <select value=${cancel.status} onChange=${(e) => setCancel({ ...cancel, status: e.target.value })}>
        <option value="">any waiting or running</option>${[...WAITING, 'processing'].map((s) => html`<option value=${s}>${s}</option>`)}</select>
      <button class="danger">cancel a page (100)</button></form>
    <p class="muted">A bulk cancel needs a collection or a status; each click cancels one page and tells its counts.</p>
  </section>`;
}

// ScheduleRow is a schedule with the button that flips its state (the API's "state": active or
// paused); a paused schedule fires nothing, so it shows no next fire.
function ScheduleRow({ s, base, act }) {
  const paused = s.state === 'paused', verb = paused ? 'resume' : 'pause';
  return html`<tr data-schedule=${s.id}><td>${s.id}</td><td>${s.cron ? s.cron + ' ' + (s.time_zone || 'UTC') : 'every ' + s.rate}</td>
    <td>${s.state}</td><td>${paused ? html`<span class="muted">— (paused)</span>` : s.next_fires && html`<${When} t=${s.next_fires[0]} />`}</td>
    <td><button data-action=${verb} onClick=${() => act(`${verb} ${s.id}`, () => api(`${base}/schedules/${enc(s.id)}/${verb}`, { method: 'POST' }).then(() => ''))}>
      ${verb}</button></td></tr>`;
}

// --- Charts ---------------------------------------------------------------------------------

function Bars({ title, series, unit }) {
  const W = 600, H = 150, n = series[0].values.length, bw = W / n;
  const top = Math.max(1, ...series.flatMap((s) => s.values.map((v) => v || 0)));
  return html`<div><h3>${title}</h3><svg class="chart" viewBox="0 0 ${W} ${H + 20}" preserveAspectRatio="none" role="img" aria-label=${title}>
    <line x1="0" y1=${H} x2=${W} y2=${H} /><text x="2" y="10">${top} ${unit}</text>
    ${series.map((s, k) => s.values.map((v, i) => v ? html`<rect class=${s.cls} x=${i * bw + k * bw / series.length} y=${H - (v / top) * H}
      width=${bw / series.length - 0.5} height=${(v / top) * H}><title>${s.label}: ${v} ${unit}</title></rect>` : null))}
    <text x="2" y=${H + 14}>−60 min</text><text x=${W - 24} y=${H + 14}>now</text></svg>
    <div class="legend">${series.map((s) => html`<span><svg width="10" height="10"><rect class=${s.cls} width="10" height="10" /></svg> ${s.label}</span>`)}</div></div>`;
}

function Charts({ params }) {
  const [lambdas] = useLambdas();
  const [a, error] = usePoll(() => api('/v1/dashboard/activity?' + query({ lambda: params.lambda })), [params.lambda]);
  const m = a ? a.minutes : [];
  const sum = (f) => m.reduce((n, x) => n + f(x), 0);
  const failed = (x) => x.ended.fatal_failure + x.ended.dead;
  return html`<section><h2>Charts: the last hour</h2>
    <form class="inline"><${LambdaSelect} any value=${params.lambda || ''} lambdas=${lambdas} onChange=${(v) => go('/charts', { lambda: v })} /></form>
    <${Err} error=${error} />
    ${a && html`<p id="totals">delivered ${sum((x) => x.delivered)}, succeeded ${sum((x) => x.ended.success)},
      retried ${sum((x) => x.ended.retriable_failure)}, failed for good ${sum(failed)}, cancelled ${sum((x) => x.ended.cancelled)}</p>
    <div class="charts">
      <${Bars} title="Throughput (per minute)" unit="tasks" series=${[
        { label: 'delivered', cls: 'bar2', values: m.map((x) => x.delivered) },
        { label: 'succeeded', cls: 'bar', values: m.map((x) => x.ended.success) },
        { label: 'failed for good', cls: 'bad', values: m.map(failed) }]} />
      <div><${Bars} title="Delivery latency of first attempts (ms, per minute)" unit="ms" series=${[
        { label: 'p50 (at most)', cls: 'bar2', values: m.map((x) => x.p50_ms) },
        { label: 'p95 (at most)', cls: 'bar', values: m.map((x) => x.p95_ms) }]} />
        <p class="muted" id="latency-note">Counted from the task's run_at: the time a task was held by a paused gate
          counts as latency too (a task keeps no time of its release).</p></div></div>`}
    <p class="muted">What this atf dev saw since it started (GET /v1/dashboard/activity): a delivery is a claim; its latency is
      the claim's time past the task's run_at, for first attempts (a retry's due time is not kept); percentiles are the
      upper bounds of their histogram buckets. Runs under --functions are not counted.</p></section>`;
}

// --- the app --------------------------------------------------------------------------------

function Login({ onDone }) {
  const [token, setToken] = useState('');
  return html`<section id="login"><h2>Token</h2><p>This atf dev (or atf dashboard) asks for a bearer token (--token or ATF_TOKEN).
    It is kept in this tab's sessionStorage only.</p>
    <form class="inline" onSubmit=${(e) => { e.preventDefault(); sessionStorage.setItem(TOKEN_KEY, token); onDone(); }}>
      <input type="password" name="token" placeholder="token" value=${token} onInput=${(e) => setToken(e.target.value)} />
      <button>use token</button></form></section>`;
}

function App() {
  const [route, setRoute] = useState(parseHash());
  const [needToken, setNeedToken] = useState(false);
  const [updated, setUpdated] = useState(new Date());
  useEffect(() => {
    const f = () => setRoute(parseHash());
    addEventListener('hashchange', f);
    const t = setInterval(() => setUpdated(new Date()), POLL_MS);
    onNeedToken = () => setNeedToken(true);
    return () => { removeEventListener('hashchange', f); clearInterval(t); };
  }, []);
  const [page, a, b] = route.parts;
  const nav = [['lambdas', 'Lambdas'], ['tasks', 'Tasks'], ['keys', 'Keys'], ['failed', 'Failed'], ['ops', 'Operations'], ['charts', 'Charts']];
  let view;
  if (needToken) view = html`<${Login} onDone=${() => setNeedToken(false)} />`;
  else if (page === 'task' && a && b) view = html`<${TaskDetail} key=${a + '/' + b} lambda=${a} id=${b} />`;
  else if (page === 'tasks') view = html`<${Tasks} params=${route.params} />`;
  else if (page === 'keys') view = html`<${Keys} params=${route.params} />`;
  else if (page === 'failed') view = html`<${Failed} params=${route.params} />`;
  else if (page === 'ops') view = html`<${Operations} params=${route.params} />`;
  else if (page === 'charts') view = html`<${Charts} params=${route.params} />`;
  else view = html`<${Lambdas} />`;
  return html`<header><h1>atf</h1><nav>${nav.map(([p, label]) => html`<a href="#/${p}" class=${page === p || (p === 'tasks' && page === 'task') || (!page && p === 'lambdas') ? 'active' : ''}>${label}</a>`)}</nav>
    <span class="live">live, every ${POLL_MS / 1000} s · ${formatTime(updated)}</span></header><main>${view}</main>`;
}

const root = document.getElementById('app');
root.textContent = ''; // the loading note
render(html`<${App} />`, root);
