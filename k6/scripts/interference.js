// Does CPU work next to the cached reads slow them down, and does it matter
// where it runs (the Go core, or the gateway's own Python beside its event
// loop) and what it is (a loop that holds the GIL, or a hash that releases it)?
//
// Two open-model scenarios per step. `interference`: the read mix of read.js
// at READ_RATE/s through the warm Redis cache (cache=READ_CACHE, l2), whose
// latency and drops are the step's figures. `interference_compute`: POST
// /api/v1/compute at RATE/s with the arm's engine and kind (COMPUTE_BODY, e.g.
// python-bcrypt), every answer checked (lib/compute.js); none at RATE 0, the
// reads alone. Both carry the step's tags; `rate` is the compute rate.
import { RATE, arrivalScenario, countIteration, env, floatEnv, intEnv, loadList, pick, readCount, stepOptions } from './lib/common.js';
import { postCompute } from './lib/compute.js';

const READ_CACHE = env('READ_CACHE', 'l2');
const HOT_SHARE = floatEnv('HOT_SHARE', 0.9);
const hot = loadList('hot_emails.json', 0);
const cold = loadList('cold_emails.json', intEnv('COLD_SAMPLE', 200));

const scenarios = {
  interference: arrivalScenario(intEnv('READ_RATE'), intEnv('READ_PRE_VUS'), intEnv('READ_MAX_VUS'), 'reads'),
};
if (RATE > 0) {
  scenarios.interference_compute = arrivalScenario(RATE, intEnv('PRE_VUS'), intEnv('MAX_VUS'), 'compute');
}
export const options = stepOptions(scenarios);

export function reads() {
  const email = Math.random() < HOT_SHARE ? pick(hot) : pick(cold);
  countIteration(readCount(email, READ_CACHE));
}

export function compute() {
  countIteration(postCompute());
}
