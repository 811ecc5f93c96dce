// Shared by every Aside load script: configuration from the environment (set by
// aside-bench), the open-model scenario, the test-wide tags and the request helpers.
import http from 'k6/http';
import { SharedArray } from 'k6/data';
import { Counter } from 'k6/metrics';

export function env(name, fallback) {
  const value = __ENV[name];
  if (value === undefined || value === '') {
    if (fallback === undefined) throw new Error(`environment variable ${name} is required`);
    return fallback;
  }
  return value;
}

export function intEnv(name, fallback) {
  const text = env(name, fallback === undefined ? undefined : String(fallback));
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a whole number, got ${text}`);
  return value;
}

// A switch: 1 on, 0 (the default) off.
export function flagEnv(name) {
  const value = intEnv(name, 0);
  if (value > 1) throw new Error(`${name} must be 0 or 1, got ${value}`);
  return value === 1;
}

export function floatEnv(name, fallback) {
  const text = env(name, String(fallback));
  const value = Number(text);
  if (!Number.isFinite(value) || value < 0 || value > 1) throw new Error(`${name} must be in [0, 1], got ${text}`);
  return value;
}

export const BASE_URL = env('BASE_URL').replace(/\/+$/, '');
export const RUN_ID = env('RUN_ID');
export const ARM = env('ARM');
export const PHASE = env('PHASE', 'none');
export const RATE = intEnv('RATE');
export const TIMEOUT_S = intEnv('TIMEOUT_S', 10);
// Which run of a repeated step (REPEAT=N runs each step N times): a tag, so
// each run's samples stay apart.
export const REPEAT = intEnv('REPEAT', 1);
const DATA_DIR = env('DATA_DIR', '');

// 1 per iteration that failed (bad status, bad body, timeout), 0 per
// iteration that succeeded, so the series exists even when nothing fails. With
// dropped_iterations it makes the drop rate.
const failedIterations = new Counter('failed_iterations');

export function countIteration(ok) {
  failedIterations.add(ok ? 0 : 1);
}

// A constant-arrival-rate scenario of the step's duration. gracefulStop exceeds
// the request timeout: every started iteration ends (answered or timed out)
// and is counted. `exec`: the exported function it runs (default: the default).
export function arrivalScenario(rate, preAllocatedVUs, maxVUs, exec) {
  const scenario = {
    executor: 'constant-arrival-rate',
    rate,
    timeUnit: '1s',
    duration: env('DURATION'),
    preAllocatedVUs,
    maxVUs,
    gracefulStop: `${TIMEOUT_S + 2}s`,
  };
  if (exec !== undefined) scenario.exec = exec;
  return scenario;
}

// One constant-arrival-rate scenario named after the bench scenario, so the
// built-in `scenario` tag carries it.
export function arrivalOptions(scenarioName) {
  return stepOptions({ [scenarioName]: arrivalScenario(RATE, intEnv('PRE_VUS'), intEnv('MAX_VUS')) });
}

// The options of a step with these scenarios: the step's tags on every sample.
export function stepOptions(scenarios) {
  return {
    scenarios,
    tags: { run_id: RUN_ID, arm: ARM, rate: String(RATE), phase: PHASE, repeat: String(REPEAT) },
    // `name` is set on every request (the URL would make one series per email);
  // no tag the report does not read, as every tag is carried by every sample.
    systemTags: ['status', 'name', 'scenario', 'expected_response', 'check'],
    summaryTrendStats: ['med', 'p(95)', 'p(99)'],
    setupTimeout: '10s',
  };
}

// What aside-bench reads back from a step's end-of-test summary
// (k6run.K6Summary.step_figures): a step run without an output (the default
// for the read and ceiling scripts) ships no sample per request, and its
// figures are these, over the whole step. The answered requests' latency
// exists only when some request was answered.
const SUMMARY_KEPT = [
  'http_req_duration{expected_response:true}',
  'http_req_duration',
  'http_reqs',
  'http_req_failed',
  'iterations',
  'dropped_iterations',
  'failed_iterations',
  'vus',
  'vus_max',
];

// handleSummary of a step's script: the kept metrics into SUMMARY_PATH, nothing
// on the console (aside-bench prints its own line per step). `renamed`: the
// summary's tagged sub-metrics to keep under the names of SUMMARY_KEPT (the
// mixed script's load apart from its checker), or as others aside-bench reads.
export function stepSummary(data, renamed = {}) {
  const path = env('SUMMARY_PATH', '');
  if (path === '') return {};
  const metrics = {};
  for (const name of SUMMARY_KEPT) if (name in data.metrics) metrics[name] = data.metrics[name];
  for (const [name, source] of Object.entries(renamed)) {
    if (source in data.metrics) metrics[name] = data.metrics[source];
    else delete metrics[name];
  }
  return { [path]: JSON.stringify({ metrics }) };
}

// Thresholds that always pass, on each metric of `names`: k6 keeps a tagged
// sub-metric in its summary only when a threshold names it.
export function summaryThresholds(names) {
  const always = (name) => (name.startsWith('http_req_duration') ? ['max>=0'] : ['count>=0']);
  return Object.fromEntries(names.map((name) => [name, always(name)]));
}

// A JSON list of strings written by the seeder; `limit` > 0 keeps the first `limit`.
export function loadList(file, limit) {
  if (DATA_DIR === '') throw new Error('environment variable DATA_DIR is required');
  return new SharedArray(file, () => {
    const parsed = JSON.parse(open(`${DATA_DIR}/${file}`));
    const list = Array.isArray(parsed) ? parsed : parsed.emails || parsed.ids;
    if (!Array.isArray(list) || list.length === 0) throw new Error(`${DATA_DIR}/${file} holds no list`);
    return limit > 0 ? list.slice(0, limit) : list;
  });
}

export function pick(list) {
  return list[Math.floor(Math.random() * list.length)];
}

export function jsonBody(response) {
  try {
    return response.json();
  } catch (_) {
    return null;
  }
}

// The ?cache= value of each read arm (aside_bench.plan.CACHE_PARAMS holds the
// same map): nocache and index bypass the cache, nopool too over a new
// PostgreSQL connection per read, cache reads Redis (l2), l1 the worker's
// memory only, hybrid memory then Redis; l1-ttl is l1 on a gateway whose
// invalidation channel is off. `l2` is the cache arm's alias; cache-bare is
// the cache arm's reads under bare.js (the ceiling's reference).
export const CACHE_PARAMS = { nocache: 'off', index: 'off', nopool: 'nopool', cache: 'l2', l2: 'l2', l1: 'l1', hybrid: 'hybrid', 'l1-ttl': 'l1', 'cache-bare': 'l2' };
export const CACHE_PARAM = CACHE_PARAMS[ARM];

// The X-Cache-Tier a hit of each mode may carry.
const HIT_TIERS = { l2: ['l2'], l1: ['l1'], hybrid: ['l1', 'l2'] };

export function countUrl(email, mode) {
  if (mode === undefined) throw new Error(`arm ${ARM} reads no count; choose one of ${Object.keys(CACHE_PARAMS).join(', ')}`);
  return `${BASE_URL}/api/v1/users/count?email=${encodeURIComponent(email)}&cache=${mode}`;
}

// True when a count answer's X-Cache (and X-Cache-Tier on a hit) fits the mode:
// cache=off and nopool must really bypass; a cached mode's outcomes are counted
// by the gateway (the hit rates), and a Redis failure there still answers correctly.
export function cacheHeadersFit(response, mode) {
  const xcache = response.headers['X-Cache'];
  if (mode === 'off' || mode === 'nopool') return xcache === 'BYPASS';
  if (xcache === 'HIT') return HIT_TIERS[mode].includes(response.headers['X-Cache-Tier']);
  return xcache === 'MISS' || xcache === 'BYPASS';
}

// GET the count of one email with the ?cache= value `mode`; `tags`: the
// request's own tags (none unless given: each is carried by every sample).
export function getCount(email, mode, tags) {
  const params = { timeout: `${TIMEOUT_S}s` };
  if (tags !== undefined) params.tags = tags;
  return http.get(countUrl(email, mode), params);
}

// True when a count answer is right: 200, a body for this email, X-Cache
// headers that fit the mode.
export function countFits(response, email, mode) {
  if (response.status !== 200) return false;
  const body = jsonBody(response);
  if (body === null || body.email !== email || !Number.isInteger(body.count) || body.count < 0) return false;
  return cacheHeadersFit(response, mode);
}

// GET the count of one email with the arm's ?cache= value (or `mode`); true
// when the answer is right. No k6 check: nothing reads the checks samples,
// each is one more sample per request k6 builds and ships to InfluxDB on the
// stack's two cores, and the verdict is counted already (failed_iterations).
export function readCount(email, mode = CACHE_PARAM) {
  return countFits(getCount(email, mode, { name: 'count' }), email, mode);
}
