// How does the read path hold up as the rate rises, per arm (where answers may
// come from)? GET /api/v1/users/count at a constant arrival rate (open model).
// HOT_SHARE of requests ask for a hot email, the rest for one of the first
// COLD_SAMPLE cold emails: a finite sample, so a warm cache holds all of it.
// The arm picks where the answer may come from (lib/common.js CACHE_PARAMS):
// cache=off (nocache, index), l2 (cache: Redis), l1 (the worker's memory) or
// hybrid (memory, then Redis).
import { arrivalOptions, countIteration, env, floatEnv, intEnv, loadList, pick, readCount, stepSummary } from './lib/common.js';

export const options = arrivalOptions(env('SCENARIO', 'read'));

const HOT_SHARE = floatEnv('HOT_SHARE', 0.9);
const hot = loadList('hot_emails.json', 0);
const cold = loadList('cold_emails.json', intEnv('COLD_SAMPLE', 200));

export default function () {
  const email = Math.random() < HOT_SHARE ? pick(hot) : pick(cold);
  countIteration(readCount(email));
}

// Without an output the step's figures come from its summary (lib/common.js).
export function handleSummary(data) {
  return stepSummary(data);
}
