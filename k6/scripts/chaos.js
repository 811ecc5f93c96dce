// The fault suite's load (aside-bench chaos), also the soak's (aside-bench soak):
// at a constant arrival rate, WRITE_SHARE of iterations create a user through the
// gateway with an Idempotency-Key, the rest are cached reads: USER_SHARE of them
// GET /api/v1/users/<id> for one of the first ID_SAMPLE seeded ids, the others
// GET /api/v1/users/count for a hot email.
//
// Every request is recorded as one sample of the trend `chaos_req` (value: the
// wall time the client waited, ms) tagged with what the driver asserts on: kind,
// status, X-Cache, Retry-After, the error code of a JSON error body, the start
// instant (epoch ms) and, for writes, the username, email, Idempotency-Key and id.
// The driver reads them from `--out json`, so every verdict comes from k6's own
// results. Counters and trends per kind and status class feed handleSummary
// (SUMMARY_PATH), which is all the soak keeps.
//
// NO_REUSE=1 opens a new connection per request: Go's transport silently resends
// an idempotent request (a GET, or a POST with an Idempotency-Key) whose reused
// connection breaks, which would hide from k6 the requests a killed process was
// serving. Each attempt then shows up as exactly one sample.
import http from 'k6/http';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { BASE_URL, TIMEOUT_S, arrivalOptions, env, floatEnv, intEnv, jsonBody, loadList, pick } from './lib/common.js';

const NO_REUSE = env('NO_REUSE', '0') === '1';
export const options = {
  ...arrivalOptions(env('SCENARIO', 'chaos')),
  noConnectionReuse: NO_REUSE,
  summaryTrendStats: ['med', 'p(95)', 'p(99)', 'max'],
};

const WRITE_SHARE = floatEnv('WRITE_SHARE', 0.2);
const USER_SHARE = floatEnv('USER_SHARE', 0.5);
// Usernames are <USER_PREFIX>.<vu>.<iteration>: unique per run and case, and the
// driver finds them (and removes them afterwards) by the prefix.
const USER_PREFIX = env('USER_PREFIX');
const SUMMARY_PATH = env('SUMMARY_PATH', '');
const hot = loadList('hot_emails.json', 0);
const ids = loadList('user_ids.json', intEnv('ID_SAMPLE', 50));

const KINDS = ['count', 'user', 'create'];
const CLASSES = ['2xx', '4xx', '5xx', 'error'];
const requests = new Trend('chaos_req', true);
const tallies = {};
const latency = {};
for (const kind of KINDS) {
  latency[kind] = new Trend(`chaos_${kind}_ms`, true);
  for (const cls of CLASSES) tallies[`${kind}_${cls}`] = new Counter(`chaos_${kind}_${cls}`);
}

function statusClass(status) {
  if (status === 0) return 'error';
  if (status < 300) return '2xx';
  return status < 500 ? '4xx' : '5xx';
}

function record(kind, started, response, extra) {
  const waited = Date.now() - started;
  const tags = { kind, status: String(response.status), start: String(started), ...extra };
  const headers = response.headers;
  if (headers['X-Cache']) tags.xcache = headers['X-Cache'];
  if (headers['X-Cache-Error']) tags.cache_error = headers['X-Cache-Error'];
  if (headers['Retry-After']) tags.retry_after = headers['Retry-After'];
  if (response.status === 0) {
    tags.error = String(response.error_code || response.error || 'unknown');
  } else if (response.status >= 400) {
    const body = jsonBody(response);
    const code = body && body.error && typeof body.error.code === 'string' ? body.error.code : '';
    // Every error must be the contract's JSON shape; "not_json" says it was not.
    tags.code = code === '' ? 'not_json' : code;
  }
  requests.add(waited, tags);
  latency[kind].add(waited);
  tallies[`${kind}_${statusClass(response.status)}`].add(1);
}

const readParams = (name) => ({ tags: { name }, timeout: `${TIMEOUT_S}s` });

function readCount(email) {
  const started = Date.now();
  const response = http.get(`${BASE_URL}/api/v1/users/count?email=${encodeURIComponent(email)}`, readParams('count'));
  const extra = { key: email };
  if (response.status === 200) {
    const body = jsonBody(response);
    extra.ok = body !== null && body.email === email && Number.isInteger(body.count) ? '1' : '0';
  }
  record('count', started, response, extra);
}

function readUser(id) {
  const started = Date.now();
  const response = http.get(`${BASE_URL}/api/v1/users/${id}`, readParams('user'));
  const extra = { key: String(id) };
  if (response.status === 200) {
    const body = jsonBody(response);
    extra.ok = body !== null && body.id === id ? '1' : '0';
  }
  record('user', started, response, extra);
}

function create() {
  const username = `${USER_PREFIX}.${exec.vu.idInTest}.${exec.vu.iterationInScenario}`;
  const email = pick(hot);
  const started = Date.now();
  const response = http.post(`${BASE_URL}/api/v1/users`, JSON.stringify({ username, email }), {
    tags: { name: 'create' },
    timeout: `${TIMEOUT_S}s`,
    // The key is the username: a retry of this very request reuses it.
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': username },
  });
  const extra = { username, email };
  if (response.status === 201) {
    const body = jsonBody(response);
    extra.id = body !== null && Number.isInteger(body.id) ? String(body.id) : '';
    extra.ok = body !== null && body.username === username && body.email === email ? '1' : '0';
  }
  if (response.headers['Idempotent-Replayed']) extra.replayed = response.headers['Idempotent-Replayed'];
  if (response.headers['X-Cache-Invalidation']) extra.invalidation = response.headers['X-Cache-Invalidation'];
  record('create', started, response, extra);
}

export default function () {
  if (Math.random() < WRITE_SHARE) create();
  else if (Math.random() < USER_SHARE) readUser(pick(ids));
  else readCount(pick(hot));
}

// The aggregate of every metric, for the soak (and as a cross-check of the
// per-request samples); nothing on the console.
export function handleSummary(data) {
  if (SUMMARY_PATH === '') return {};
  return { [SUMMARY_PATH]: JSON.stringify({ metrics: data.metrics, state: data.state }) };
}
