// The ceiling's baseline: GET /healthz, a trivial route served by the same
// gunicorn as the reads, at a constant arrival rate.
import http from 'k6/http';
import { check } from 'k6';
import { BASE_URL, TIMEOUT_S, arrivalOptions, countIteration, env, stepSummary } from './lib/common.js';

export const options = arrivalOptions(env('SCENARIO', 'ceiling'));

export default function () {
  const response = http.get(`${BASE_URL}/healthz`, { tags: { name: 'healthz' }, timeout: `${TIMEOUT_S}s` });
  countIteration(check(response, { 'healthz: status 200': (r) => r.status === 200 }));
}

// Without an output the step's figures come from its summary (lib/common.js).
export function handleSummary(data) {
  return stepSummary(data);
}
