// Is k6 itself the limit of a ceiling? The read script's requests (the same
// URLs, the same choice of keys) with none of its telemetry: no check, no
// custom metric, no tag k6 can leave off, run with no output; its figures come
// from its end-of-test summary (lib/common.js stepSummary). CHECKS, TAGS and
// METRICS (1: on) add a k6 check of each answer, the step's tags and the
// failed_iterations counter (the read script's telemetry), so aside-bench
// k6cost prices each.
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
  stepSummary,
} from './lib/common.js';

const CHECKS = flagEnv('CHECKS');
const TAGS = flagEnv('TAGS');
const METRICS = flagEnv('METRICS');

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
  return stepSummary(data);
}
