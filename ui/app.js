// The operator status page: the worker host per mode, the host's capacity and drain mode, limits,
// running turns, a chart of turns started and egress denials over the last hour, recent denials
// and events, kept current by the governance event stream. The chart is SVG drawn here (no
// external asset: the CSP allows only this origin). Everything shown is set with textContent:
// event payloads carry hosts and paths chosen by turn commands and are never parsed as HTML.
'use strict';

const MAX_EVENTS = 100;
const MAX_DENIALS = 50;
const BYTE_LIMITS = new Set(['memory', 'data', 'file_size', 'tmp_size']);
const SVG = 'http://www.w3.org/2000/svg';
const HOUR_MS = 60 * 60 * 1000;
const BUCKETS = 12;
const BUCKET_MS = HOUR_MS / BUCKETS;
// Pages of 1000 events read per kind for the chart: a host busier than that in an hour shows
// the newest 5000 (the summary says so).
const CHART_PAGES = 5;
const CHART_KINDS = ['worker_launch', 'egress_denial'];

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = String(text);
  if (className !== undefined) node.className = className;
  return node;
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const cell of cells) tr.append(cell instanceof Node ? cell : element('td', cell));
  return tr;
}

function humanBytes(bytes) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${Number.isInteger(value) ? value : value.toFixed(1)} ${units[unit]}`;
}

async function getJson(path) {
  const response = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  if (response.status === 401) {
    window.location.assign('/ui/login');
    throw new Error('signed out');
  }
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function renderModes(workerHost) {
  const body = document.querySelector('#modes tbody');
  body.replaceChildren();
  for (const mode of ['ordinary', 'restricted']) {
    const availability = workerHost === null ? undefined : workerHost[mode];
    let state;
    if (availability === undefined) state = element('td', mode === 'restricted' ? 'disabled' : 'unknown', 'disabled');
    else
      state = element(
        'td',
        availability.available ? 'available' : 'unavailable',
        availability.available ? 'available' : 'unavailable',
      );
    const tr = row([
      mode,
      state,
      availability?.requirement ??
        (availability === undefined && mode === 'restricted' ? 'modes.restricted.enabled is false' : ''),
      availability?.checkedAt ?? '',
    ]);
    tr.id = `mode-${mode}`;
    body.append(tr);
  }
  // Present only when workspaces are configured: then whether a turn can run in one.
  const workspaces = workerHost?.workspaceTurns;
  if (workspaces !== undefined) {
    const state = workspaces.available ? 'available' : 'unavailable';
    const tr = row([
      'workspace turns',
      element('td', state, state),
      workspaces.requirement ?? '',
      workspaces.checkedAt,
    ]);
    tr.id = 'mode-workspace-turns';
    body.append(tr);
  }
}

function renderRootServer(workerHost) {
  const warning = document.getElementById('root-server');
  const text = workerHost?.rootServer?.warning;
  warning.textContent = text === undefined ? '' : `Root server: ${text}`;
  warning.hidden = text === undefined;
}

function renderLimits(workerHost) {
  const body = document.querySelector('#limits tbody');
  body.replaceChildren();
  if (workerHost === null) return;
  for (const limit of workerHost.limits.enforced) {
    const value = BYTE_LIMITS.has(limit.limit) ? humanBytes(limit.value) : String(limit.value);
    body.append(
      row([limit.limit, 'enforced', value, limit.backend ? `${limit.source} (${limit.backend})` : limit.source]),
    );
  }
  for (const limit of workerHost.limits.absent) body.append(row([limit.limit, 'absent', limit.reason, limit.source]));
}

function renderCapacity(capacity) {
  const text = document.getElementById('capacity');
  const draining = document.getElementById('draining');
  if (capacity === undefined) {
    text.textContent = 'This supervisor serves no turns.';
    draining.hidden = true;
    return;
  }
  text.textContent =
    `${capacity.turnsRunning} of ${capacity.maxTurns} turns running, ${capacity.freeSlots} free slots, ` +
    `${capacity.workspacesHeld} workspaces held.`;
  draining.hidden = !capacity.draining;
}

// The last attack battery run (turnhost check --attack): every case, broken ones marked.
function renderAttested(workerHost) {
  const body = document.querySelector('#attested tbody');
  body.replaceChildren();
  const attested = workerHost?.attested;
  const summary = document.getElementById('attested-summary');
  if (attested === undefined) {
    summary.textContent = 'No attack run yet: run turnhost check --attack.';
    return;
  }
  const { held, broken, skipped } = attested.counts;
  summary.textContent = `Attacked at ${attested.checkedAt}: ${held} held, ${broken} broken, ${skipped} skipped.`;
  for (const attestedCase of attested.cases) {
    const tr = row([attestedCase.mode, attestedCase.case, attestedCase.result, attestedCase.reason]);
    if (attestedCase.result === 'broken') tr.className = 'warning';
    body.append(tr);
  }
}

async function refreshStatus() {
  const status = await getJson('/api/status');
  const workerHost = status.runtime.workerHost;
  renderCapacity(status.runtime.capacity);
  document.getElementById('software').textContent =
    `${status.software.release} (${status.software.sourceCommit.slice(0, 12)})`;
  renderModes(workerHost);
  renderRootServer(workerHost);
  renderLimits(workerHost);
  renderAttested(workerHost);
  document.getElementById('identity').textContent =
    workerHost === null
      ? 'The boot probe failed: run turnhost check.'
      : `Identity ${workerHost.identity}${workerHost.workerUid !== undefined ? `, worker uid ${workerHost.workerUid}` : ''}.`;
  const view = workerHost?.governed?.configurationView;
  document.getElementById('configuration').textContent =
    view === 'live' ? 'Configuration: reloaded since start (live).' : 'Configuration: as at start.';
}

const running = new Map();

function renderRunning() {
  const body = document.querySelector('#running-turns tbody');
  body.replaceChildren();
  for (const turn of running.values()) {
    const tr = row([turn.turnId, turn.sessionId ?? '', turn.mode, turn.command, turn.workerUid ?? '', turn.startedAt]);
    tr.dataset.turnId = turn.turnId;
    body.append(tr);
  }
  document.getElementById('no-running-turns').hidden = running.size > 0;
}

function describe(event) {
  const p = event.payload ?? {};
  const details = ['host', 'port', 'reason', 'status', 'mode', 'requirement', 'outcome', 'command']
    .filter((key) => p[key] !== undefined && p[key] !== null && typeof p[key] !== 'object')
    .map((key) => `${key}=${p[key]}`)
    .join(' ');
  return `${event.id} ${event.at} ${event.kind} ${event.turnId ?? '-'} ${details}`;
}

function prepend(list, text, max, attributes) {
  const item = element('li', text);
  for (const [name, value] of Object.entries(attributes)) item.dataset[name] = value;
  list.prepend(item);
  while (list.children.length > max) list.lastElementChild.remove();
}

// Event id -> time, per charted kind: the history read at load plus what the stream brings.
const charted = new Map(CHART_KINDS.map((kind) => [kind, new Map()]));
let chartTruncated = false;

/** The charted kind's events of the last hour, newest first, a bounded number of pages. */
async function loadHistory(kind) {
  const since = Date.now() - HOUR_MS;
  const times = charted.get(kind);
  let before;
  for (let page = 0; page < CHART_PAGES; page += 1) {
    // kind is one of CHART_KINDS and before an event id: nothing to escape.
    const cursor = before === undefined ? '' : `&before=${before}`;
    const answer = await getJson(`/api/governance/events?kind=${kind}&order=desc&limit=1000${cursor}`);
    for (const event of answer.events) {
      const at = Date.parse(event.at);
      if (at < since) return;
      times.set(event.id, at);
    }
    if (answer.nextBefore === null) return;
    before = answer.nextBefore;
  }
  chartTruncated = true;
}

function bucketCounts(kind, now) {
  const counts = new Array(BUCKETS).fill(0);
  for (const at of charted.get(kind).values()) {
    const age = now - at;
    if (age < 0 || age >= HOUR_MS) continue;
    counts[BUCKETS - 1 - Math.floor(age / BUCKET_MS)] += 1;
  }
  return counts;
}

function svg(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Bars per 5 minutes: turns started and egress denials, scaled to the busiest bucket. */
function renderChart() {
  const now = Date.now();
  const turns = bucketCounts('worker_launch', now);
  const denials = bucketCounts('egress_denial', now);
  const chart = document.getElementById('chart');
  const width = 600;
  const height = 120;
  const top = Math.max(1, ...turns, ...denials);
  const slot = width / BUCKETS;
  const nodes = [svg('line', { x1: 0, y1: height, x2: width, y2: height, class: 'axis' })];
  for (let i = 0; i < BUCKETS; i += 1) {
    const group = svg('g', { 'data-bucket': i, 'data-turns': turns[i], 'data-denials': denials[i] });
    const minutesAgo = (BUCKETS - i) * 5;
    group.append(svg('title', {}, `${minutesAgo}-${minutesAgo - 5} min ago: ${turns[i]} turns, ${denials[i]} denials`));
    for (const [offset, count, className] of [
      [4, turns[i], 'bar-turns'],
      [slot / 2, denials[i], 'bar-denials'],
    ]) {
      const barHeight = (count / top) * (height - 10);
      group.append(
        svg('rect', {
          x: i * slot + offset,
          y: height - barHeight,
          width: slot / 2 - 6,
          height: barHeight,
          class: className,
        }),
      );
    }
    nodes.push(group);
  }
  for (const [x, label, anchor] of [
    [0, '-60 min', 'start'],
    [width / 2, '-30 min', 'middle'],
    [width, 'now', 'end'],
  ])
    nodes.push(svg('text', { x, y: height + 14, 'text-anchor': anchor, class: 'axis-label' }, label));
  nodes.push(svg('text', { x: 0, y: 10, class: 'axis-label' }, `max ${top}`));
  chart.replaceChildren(...nodes);
  const sum = (counts) => counts.reduce((a, b) => a + b, 0);
  document.getElementById('chart-summary').textContent =
    `Last hour: ${sum(turns)} turns started, ${sum(denials)} egress denials` +
    (chartTruncated ? ' (the newest events only: more than the page reads).' : '.');
}

async function refreshChart() {
  for (const kind of CHART_KINDS) await loadHistory(kind);
  renderChart();
}

function takeEvent(event) {
  if (charted.has(event.kind)) {
    charted.get(event.kind).set(event.id, Date.parse(event.at));
    renderChart();
  }
  prepend(document.getElementById('events'), describe(event), MAX_EVENTS, { kind: event.kind, id: String(event.id) });
  if (event.kind === 'egress_denial')
    prepend(document.getElementById('denials'), describe(event), MAX_DENIALS, { host: String(event.payload.host) });
  if (event.kind === 'worker_launch') {
    running.set(event.turnId, {
      turnId: event.turnId,
      sessionId: event.sessionId,
      mode: event.payload.mode,
      command: event.payload.command,
      workerUid: event.payload.workerUid,
      startedAt: event.at,
    });
    renderRunning();
  } else if (event.kind === 'worker_exit') {
    running.delete(event.turnId);
    renderRunning();
  }
  // Capacity moves with every launch and exit; drain mode with host_drain.
  if (['worker_launch', 'worker_exit', 'host_drain', 'worker_host_refusal'].includes(event.kind)) {
    refreshStatus().catch(() => undefined);
  }
}

async function refreshActivity() {
  const activity = await getJson('/api/activity');
  running.clear();
  for (const turn of activity.runningTurns) running.set(turn.turnId, turn);
  renderRunning();
  const denials = document.getElementById('denials');
  denials.replaceChildren();
  for (const event of activity.recentDenials)
    prepend(denials, describe(event), MAX_DENIALS, { host: String(event.payload.host) });
  const events = document.getElementById('events');
  events.replaceChildren();
  for (const event of activity.recentEvents)
    prepend(events, describe(event), MAX_EVENTS, { kind: event.kind, id: String(event.id) });
}

function connect() {
  const badge = document.getElementById('connection');
  const scheme = window.location.protocol === 'https:' ? 'wss' : 'ws';
  const socket = new WebSocket(`${scheme}://${window.location.host}/api/governance/events/stream`);
  socket.addEventListener('open', () => {
    badge.textContent = 'live';
    badge.className = 'badge live';
    // Events committed before the stream opened are in the activity answer.
    refreshActivity().catch(() => undefined);
  });
  socket.addEventListener('message', (message) => {
    const data = JSON.parse(message.data);
    if (data.type === 'event') takeEvent(data.event);
  });
  socket.addEventListener('close', () => {
    badge.textContent = 'reconnecting';
    badge.className = 'badge';
    setTimeout(connect, 2000);
  });
}

document.addEventListener('DOMContentLoaded', () => {
  refreshStatus()
    .then(() => refreshChart())
    .then(() => connect())
    .catch(() => undefined);
  setInterval(() => refreshStatus().catch(() => undefined), 15000);
  // The window slides: bars move left and old events fall out once a minute.
  setInterval(renderChart, 60000);
});
