// Big cached values: GET /api/v1/tracks/<id> over the seeded tracks (most a few
// hundred points, a tail to 50,000: k6/data/tracks.json), at a constant arrival
// rate. The arm picks how the gateway caches them (ARM_QUERY, from
// aside_bench/trackplan.py). Each read is named by its size class
// ("track 0".."track 4", SIZE_BOUNDS), so latency reads back per value size.
// Bodies are discarded: k6 shares the two cores and the answers run to 1 MB;
// the check reads the status, X-Cache and Content-Length.
import http from 'k6/http';
import { check } from 'k6';
import { SharedArray } from 'k6/data';
import { BASE_URL, TIMEOUT_S, arrivalOptions, countIteration, env } from './lib/common.js';

export const options = Object.assign(arrivalOptions('tracks'), { discardResponseBodies: true });

const ARM_QUERY = env('ARM_QUERY');
const UNCACHED = ARM_QUERY.includes('cache=off');
const BOUNDS = env('SIZE_BOUNDS').split(',').map(Number);
const tracks = new SharedArray('tracks', () => {
  const parsed = JSON.parse(open(`${env('DATA_DIR')}/tracks.json`));
  if (!Array.isArray(parsed.tracks) || parsed.tracks.length === 0) throw new Error('tracks.json holds no track');
  return parsed.tracks;
});

function sizeClass(bytes) {
  const i = BOUNDS.findIndex((bound) => bytes < bound);
  return i === -1 ? BOUNDS.length : i;
}

export default function () {
  const track = tracks[Math.floor(Math.random() * tracks.length)];
  const response = http.get(`${BASE_URL}/api/v1/tracks/${track.id}?${ARM_QUERY}`, {
    tags: { name: `track ${sizeClass(track.bytes)}` },
    timeout: `${TIMEOUT_S}s`,
  });
  countIteration(check(response, {
    'track: 200, X-Cache and a body': (r) => {
      if (r.status !== 200 || !(Number(r.headers['Content-Length']) > 0)) return false;
      const xcache = r.headers['X-Cache'];
      return UNCACHED ? xcache === 'BYPASS' : ['HIT', 'MISS', 'BYPASS'].includes(xcache);
    },
  }));
}
