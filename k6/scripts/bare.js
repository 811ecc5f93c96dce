// Is k6 itself the limit of a ceiling? The read script's requests (the same
// URLs, the same choice of keys) with none of its telemetry: no check, no
// custom metric, no tag k6 can leave off, run with no output. handleSummary
// keeps only what the ceiling decides on (whole-run p95, dropped iterations,
// failed requests, VUs) in SUMMARY_PATH. CHECKS, TAGS and METRICS (1: on) add
// a k6 check of each answer, the step's tags and the failed_iterations counter
// (the read script's telemetry), so aside-bench k6cost prices each.
import { check } from 'k6';
import {
  CACHE_PARAM,
  RATE,
  arrivalScenario,
  countFits,
  countIteration,
  env,
  flagEnv,
  floatEnv,
  getCount,
  intEnv,
  loadList,
  pick,
  stepOptions,
} from './lib/common.js';

const CHECKS = flagEnv('CHECKS');
const TAGS = flagEnv('TAGS');
const METRICS = flagEnv('METRICS');
const SUMMARY_PATH = env('SUMMARY_PATH', '');
// What the bench reads back from the summary (k6run.K6Summary.step_figures).
const KEPT = ['http_req_duration', 'http_reqs', 'http_req_failed', 'iterations', 'dropped_iterations', 'vus', 'vus_max'];

const scenarios = { [env('SCENARIO', 'ceiling')]: arrivalScenario(RATE, intEnv('PRE_VUS'), intEnv('MAX_VUS')) };
export const options = TAGS
  ? stepOptions(scenarios)
  : { scenarios, systemTags: [], summaryTrendStats: ['med', 'p(95)', 'p(99)'], setupTimeout: '10s' };

const HOT_SHARE = floatEnv('HOT_SHARE', 0.9);
const hot = loadList('hot_emails.json', 0);
const cold = loadList('cold_emails.json', intEnv('COLD_SAMPLE', 200));

export default function () {
  const email = Math.random() < HOT_SHARE ? pick(hot) : pick(cold);
  const response = getCount(email, CACHE_PARAM, TAGS ? { name: 'count' } : undefined);
  if (!CHECKS && !METRICS) return;
  const fits = (r) => countFits(r, email, CACHE_PARAM);
  const ok = CHECKS ? check(response, { 'count: 200, body and X-Cache': fits }) : fits(response);
  if (METRICS) countIteration(ok);
}

export function handleSummary(data) {
  if (SUMMARY_PATH === '') return {};
  const metrics = {};
  for (const name of KEPT) if (name in data.metrics) metrics[name] = data.metrics[name];
  return { [SUMMARY_PATH]: JSON.stringify({ metrics }) };
}
