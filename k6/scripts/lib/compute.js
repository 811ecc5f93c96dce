// The compute request of a bench step and its check. aside-bench builds both
// (aside_bench/interference.py): COMPUTE_BODY, the JSON body sent as is, and
// COMPUTE_EXPECT, the fields every answer must carry exactly (kind, engine, and
// the checksum, the PBKDF2 key or the bcrypt cost). A bcrypt hash is salted at
// random, so it is checked against COMPUTE_HASH_PATTERN instead.
import http from 'k6/http';
import { check } from 'k6';
import { BASE_URL, TIMEOUT_S, env, jsonBody } from './common.js';

const BODY = env('COMPUTE_BODY');
const EXPECT = JSON.parse(env('COMPUTE_EXPECT'));
const HASH = new RegExp(env('COMPUTE_HASH_PATTERN'));

export function answerFits(body) {
  if (body === null) return false;
  for (const [name, value] of Object.entries(EXPECT)) {
    if (body[name] !== value) return false;
  }
  return EXPECT.kind !== 'bcrypt' || (typeof body.hash === 'string' && HASH.test(body.hash));
}

// POST the step's compute request; true when it answered 200 with the expected answer.
export function postCompute() {
  const response = http.post(`${BASE_URL}/api/v1/compute`, BODY, {
    tags: { name: 'compute' },
    timeout: `${TIMEOUT_S}s`,
    headers: { 'Content-Type': 'application/json' },
  });
  return check(response, {
    'compute: 200 and the expected answer': (r) => r.status === 200 && answerFits(jsonBody(r)),
  });
}
