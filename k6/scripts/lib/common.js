// Shared by every Aside load script: configuration from the environment (set by
// aside-bench), the open-model scenario, the test-wide tags and the request helpers.
import http from 'k6/http';
import { check } from 'k6';
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
const DATA_DIR = env('DATA_DIR', '');

// 1 per iteration whose checks failed (bad status, bad body, timeout), 0 per
// iteration that succeeded, so the series exists even when nothing fails. With
// dropped_iterations it makes the drop rate.
const failedIterations = new Counter('failed_iterations');

export function countIteration(ok) {
  failedIterations.add(ok ? 0 : 1);
}

// One constant-arrival-rate scenario named after the bench scenario, so the
// built-in `scenario` tag carries it. gracefulStop exceeds the request timeout:
// every started iteration ends (answered or timed out) and is counted.
export function arrivalOptions(scenarioName) {
  return {
    scenarios: {
      [scenarioName]: {
        executor: 'constant-arrival-rate',
        rate: RATE,
        timeUnit: '1s',
        duration: env('DURATION'),
        preAllocatedVUs: intEnv('PRE_VUS'),
        maxVUs: intEnv('MAX_VUS'),
        gracefulStop: `${TIMEOUT_S + 2}s`,
      },
    },
    tags: { run_id: RUN_ID, arm: ARM, rate: String(RATE), phase: PHASE },
    // `name` is set on every request (the URL would make one series per email);
  // no tag the report does not read, as every tag is carried by every sample.
    systemTags: ['status', 'name', 'scenario', 'expected_response', 'check'],
    summaryTrendStats: ['med', 'p(95)', 'p(99)'],
    setupTimeout: '10s',
  };
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

// GET the count of one email. The uncached arms (nocache, index) add cache=off.
export function readCount(email, cached) {
  const query = `email=${encodeURIComponent(email)}${cached ? '' : '&cache=off'}`;
  const response = http.get(`${BASE_URL}/api/v1/users/count?${query}`, {
    tags: { name: 'count' },
    timeout: `${TIMEOUT_S}s`,
  });
  // One check, not three: each check is a sample k6 processes and ships to
  // InfluxDB, and at 1000/s k6 shares the stack's two cores.
  return check(response, {
    'count: 200, body and X-Cache': (r) => {
      if (r.status !== 200) return false;
      const body = jsonBody(r);
      if (body === null || body.email !== email || !Number.isInteger(body.count) || body.count < 0) return false;
      // cache=off must really bypass; the cache arm's outcomes are counted by the
      // gateway (the hit rate), a Redis failure there still answers correctly.
      const xcache = r.headers['X-Cache'];
      return cached ? xcache === 'HIT' || xcache === 'MISS' || xcache === 'BYPASS' : xcache === 'BYPASS';
    },
  });
}
