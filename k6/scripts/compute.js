// CPU work: POST /api/v1/compute with engine = the arm (go | python) at a
// constant arrival rate. The checksum is checked against the closed form of
// contracts/compute.json: for n*100000 iterations it is n * 46250000.
import http from 'k6/http';
import { check } from 'k6';
import { ARM, BASE_URL, TIMEOUT_S, arrivalOptions, countIteration, intEnv, jsonBody } from './lib/common.js';

export const options = arrivalOptions('compute');

const COMPLEXITY = intEnv('COMPLEXITY', 10);
const payload = JSON.stringify({ complexity: COMPLEXITY, engine: ARM });
const expected = COMPLEXITY * 46250000;

export default function () {
  const response = http.post(`${BASE_URL}/api/v1/compute`, payload, {
    tags: { name: 'compute' },
    timeout: `${TIMEOUT_S}s`,
    headers: { 'Content-Type': 'application/json' },
  });
  const body = jsonBody(response);
  const ok = check(response, {
    'compute: status 200': (r) => r.status === 200,
    'compute: checksum is right': () => body !== null && body.checksum === expected,
  });
  countIteration(ok);
}
