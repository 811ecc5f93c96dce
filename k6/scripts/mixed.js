// Reads and writes together: WRITE_SHARE of iterations create a user with a hot
// email (which makes that email's cached count stale) and delete it again, so the
// table ends as it started; the rest are reads as in read.js. Usernames carry
// the run id, so aside-bench can remove what an interrupted run left behind.
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
import {
  ARM,
  BASE_URL,
  RUN_ID,
  TIMEOUT_S,
  arrivalOptions,
  countIteration,
  floatEnv,
  intEnv,
  jsonBody,
  loadList,
  pick,
  readCount,
} from './lib/common.js';

export const options = arrivalOptions('mixed');

const HOT_SHARE = floatEnv('HOT_SHARE', 0.9);
const WRITE_SHARE = floatEnv('WRITE_SHARE', 0.1);
const hot = loadList('hot_emails.json', 0);
const cold = loadList('cold_emails.json', intEnv('COLD_SAMPLE', 200));
const cached = ARM === 'cache';
const params = (name) => ({
  tags: { name },
  timeout: `${TIMEOUT_S}s`,
  headers: { 'Content-Type': 'application/json' },
});

function createAndDelete() {
  const username = `k6.${RUN_ID}.${exec.vu.idInTest}.${exec.vu.iterationInScenario}`;
  const email = pick(hot);
  const created = http.post(`${BASE_URL}/api/v1/users`, JSON.stringify({ username, email }), params('create'));
  const body = jsonBody(created);
  const createdOk = check(created, {
    'create: status 201': (r) => r.status === 201,
    'create: body has an id': () => body !== null && Number.isInteger(body.id),
  });
  if (!createdOk) return false;
  const deleted = http.del(`${BASE_URL}/api/v1/users/${body.id}`, null, params('delete'));
  return check(deleted, { 'delete: status 200 or 204': (r) => r.status === 200 || r.status === 204 });
}

export default function () {
  let ok;
  if (Math.random() < WRITE_SHARE) ok = createAndDelete();
  else ok = readCount(Math.random() < HOT_SHARE ? pick(hot) : pick(cold), cached);
  countIteration(ok);
}
