// Reads and writes together, and does any read miss an acknowledged write?
//
// The load (scenario `mixed`): WRITE_SHARE of the requests write. A writing
// iteration creates a user with a hot email (which makes that email's cached
// count stale) and deletes it again, so the table ends as it started: two
// writes, so iterations write with probability WRITE_SHARE / (2 - WRITE_SHARE)
// and 10 % of the requests are writes at the default 0.1 (at 1000 iterations/s,
// 1,053 requests/s). The rest are reads as in read.js, with the arm's ?cache=
// value. Usernames carry the run id, so aside-bench can remove what an
// interrupted run left behind.
//
// The staleness checker (scenario `stale`, STALE_PER_MIN iterations a minute,
// 0: none) runs beside it, so its requests stay out of the step's latency and
// drops. Each iteration owns two emails nobody else uses and walks a user of
// its own through create (email A), PATCH (email B) and delete. Before the
// first write and after each acknowledged (2xx) one it reads every key the
// write touched STALE_READS_AFTER times (the counts of A and B, the user by
// id) with the arm's ?cache= value and `Connection: close`: each read opens a
// fresh connection, which gunicorn hands to any worker, so a worker other
// than the one that forwarded the write answers some of them. A read whose
// answer does not match the state the last acknowledged write left adds 1 to
// the counter `stale_reads` (0 when it matches; tagged, like every sample,
// with the arm); a read with no usable answer adds 1 to `stale_check_errors`.
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';
import {
  ARM,
  BASE_URL,
  CACHE_PARAM,
  PHASE,
  RATE,
  RUN_ID,
  TIMEOUT_S,
  arrivalOptions,
  countIteration,
  countUrl,
  floatEnv,
  intEnv,
  jsonBody,
  loadList,
  pick,
  readCount,
  stepSummary,
  summaryThresholds,
} from './lib/common.js';

const STALE_PER_MIN = intEnv('STALE_PER_MIN', 0);
const STALE_READS_AFTER = intEnv('STALE_READS_AFTER', 2);

function withChecker(options) {
  if (STALE_PER_MIN === 0) return options;
  const load = options.scenarios.mixed;
  options.scenarios.stale = {
    executor: 'constant-arrival-rate',
    exec: 'staleCheck',
    rate: STALE_PER_MIN,
    timeUnit: '1m',
    duration: load.duration,
    preAllocatedVUs: 2,
    maxVUs: 10,
    gracefulStop: load.gracefulStop,
  };
  return options;
}

// Without an output (SAMPLES=summary, the default) the step's figures come
// from its summary: the load's own (scenario mixed), apart from the checker's,
// by request kind, and the checker's counts (stale_checked: reads it judged).
const LOAD = 'scenario:mixed';
const ANSWERED = `http_req_duration{${LOAD},expected_response:true}`;
const KINDS = ['count', 'create', 'delete'];
const FROM_SUMMARY = {
  'http_req_duration{expected_response:true}': ANSWERED,
  http_req_duration: `http_req_duration{${LOAD}}`,
  http_reqs: `http_reqs{${LOAD}}`,
  iterations: `iterations{${LOAD}}`,
  dropped_iterations: `dropped_iterations{${LOAD}}`,
  ...Object.fromEntries(
    KINDS.map((kind) => [`http_req_duration{name:${kind}}`, `http_req_duration{${LOAD},expected_response:true,name:${kind}}`]),
  ),
  stale_checked: 'stale_checked',
  stale_reads: 'stale_reads',
  stale_check_errors: 'stale_check_errors',
};

function withSummary(options) {
  const tagged = Object.values(FROM_SUMMARY).filter((name) => name.includes('{'));
  options.thresholds = summaryThresholds(tagged);
  options.summaryTrendStats = [...options.summaryTrendStats, 'count'];
  return options;
}

export const options = withSummary(withChecker(arrivalOptions('mixed')));

const HOT_SHARE = floatEnv('HOT_SHARE', 0.9);
const WRITE_SHARE = floatEnv('WRITE_SHARE', 0.1);
// A writing iteration sends two writes (create, delete) and a reading one a read.
const WRITING_ITERATIONS = WRITE_SHARE / (2 - WRITE_SHARE);
const hot = loadList('hot_emails.json', 0);
const cold = loadList('cold_emails.json', intEnv('COLD_SAMPLE', 200));
const params = (name) => ({
  tags: { name },
  timeout: `${TIMEOUT_S}s`,
  headers: { 'Content-Type': 'application/json' },
});

function createAndDelete() {
  const username = `k6.${RUN_ID}.${exec.vu.idInTest}.${exec.vu.iterationInScenario}`;
  const email = pick(hot);
  const created = http.post(`${BASE_URL}/api/v1/users`, JSON.stringify({ username, email }), params('create'));
  const body = jsonBody(created);
  const createdOk = check(created, {
    'create: status 201': (r) => r.status === 201,
    'create: body has an id': () => body !== null && Number.isInteger(body.id),
  });
  if (!createdOk) return false;
  const deleted = http.del(`${BASE_URL}/api/v1/users/${body.id}`, null, params('delete'));
  return check(deleted, { 'delete: status 200 or 204': (r) => r.status === 200 || r.status === 204 });
}

export default function () {
  let ok;
  if (Math.random() < WRITING_ITERATIONS) ok = createAndDelete();
  else ok = readCount(Math.random() < HOT_SHARE ? pick(hot) : pick(cold));
  countIteration(ok);
}

// ---- the staleness checker ------------------------------------------------------
const staleReads = new Counter('stale_reads');
const staleErrors = new Counter('stale_check_errors');
const staleChecked = new Counter('stale_checked');
// Bumped when an iteration could not finish its writes: the next one takes
// fresh emails, so a user left behind cannot pass for a stale read.
let generation = 0;

function freshGet(url, name) {
  return http.get(url, { tags: { name }, timeout: `${TIMEOUT_S}s`, headers: { Connection: 'close' } });
}

function verdict(matches) {
  if (matches === null) staleErrors.add(1);
  else {
    staleReads.add(matches ? 0 : 1);
    staleChecked.add(1);
  }
}

// The count of `email` must be `expected`.
function checkCount(email, expected) {
  for (let i = 0; i < STALE_READS_AFTER; i++) {
    const response = freshGet(countUrl(email, CACHE_PARAM), 'stale_count');
    const body = response.status === 200 ? jsonBody(response) : null;
    verdict(body === null || !Number.isInteger(body.count) ? null : body.count === expected);
  }
}

// The user `id` must have `email`, or be gone when `email` is null.
function checkUser(id, email) {
  for (let i = 0; i < STALE_READS_AFTER; i++) {
    const response = freshGet(`${BASE_URL}/api/v1/users/${id}?cache=${CACHE_PARAM}`, 'stale_user');
    if (response.status === 404) {
      verdict(email === null);
    } else {
      const body = response.status === 200 ? jsonBody(response) : null;
      verdict(body === null ? null : email !== null && body.email === email);
    }
  }
}

function checkerEmails() {
  // Unique to the step (arm, phase, rate), the VU and its generation.
  const local = `s${exec.vu.idInTest}g${generation}.${ARM}.${PHASE}.${RATE}`;
  return [`${local}.a@${RUN_ID}.stale.example`, `${local}.b@${RUN_ID}.stale.example`];
}

// Whether a write was acknowledged; if not, the iteration stops and the next
// one starts from fresh emails.
function acknowledged(ok) {
  if (ok) return true;
  staleErrors.add(1);
  generation += 1;
  return false;
}

export function staleCheck() {
  const [first, second] = checkerEmails();
  const users = `${BASE_URL}/api/v1/users`;
  // Before any write: both counts are 0. These reads also put that state into
  // the tiers of the workers they land on, which the writes below make stale.
  checkCount(first, 0);
  checkCount(second, 0);
  const username = `k6.${RUN_ID}.s${exec.vu.idInTest}.${exec.vu.iterationInScenario}`;
  const created = http.post(users, JSON.stringify({ username, email: first }), params('stale_create'));
  const body = jsonBody(created);
  const id = body !== null && Number.isInteger(body.id) ? body.id : null;
  if (!acknowledged(created.status === 201 && id !== null)) return;
  checkCount(first, 1);
  checkUser(id, first);
  const patched = http.patch(`${users}/${id}`, JSON.stringify({ email: second }), params('stale_patch'));
  const patchedOk = acknowledged(patched.status === 200);
  if (patchedOk) {
    checkCount(first, 0);
    checkCount(second, 1);
    checkUser(id, second);
  }
  const deleted = http.del(`${users}/${id}`, null, params('stale_delete'));
  if (!acknowledged(deleted.status === 200 || deleted.status === 204) || !patchedOk) return;
  checkCount(second, 0);
  checkUser(id, null);
}

export function handleSummary(data) {
  return stepSummary(data, FROM_SUMMARY);
}
