// The read path: GET /api/v1/users/count at a constant arrival rate (open model).
// HOT_SHARE of requests ask for a hot email, the rest for one of the first
// COLD_SAMPLE cold emails: a finite sample, so a warm cache holds all of it.
import { ARM, arrivalOptions, countIteration, env, floatEnv, intEnv, loadList, pick, readCount } from './lib/common.js';

export const options = arrivalOptions(env('SCENARIO', 'read'));

const HOT_SHARE = floatEnv('HOT_SHARE', 0.9);
const hot = loadList('hot_emails.json', 0);
const cold = loadList('cold_emails.json', intEnv('COLD_SAMPLE', 200));
const cached = ARM === 'cache';

export default function () {
  const email = Math.random() < HOT_SHARE ? pick(hot) : pick(cold);
  countIteration(readCount(email, cached));
}
