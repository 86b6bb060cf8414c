// An analysis run as a background job (server/jobs.py's Analysis: /patch/jobs, /circuits/jobs):
// POST the request, poll the job until it ends, and show its progress in the page's
// #progress-box (a <progress> and a line "done / total UNITS · seconds").
import { apiGet, apiPost } from "./api.js";
import { $ } from "./dom.js";
import { int } from "./format.js";

const POLL_MS = 150;

// A job still going: "queued" (waiting for the server's memory budget, server/memory.py), "starting"
// (a training run before its first step) or "running"; every other status is its end.
export const GOING = new Set(["queued", "starting", "running"]);
export const going = (job) => !!job && GOING.has(job.status);

const pause = (ms, signal) => new Promise((ok, fail) => {
  const t = setTimeout(ok, ms);
  signal.addEventListener("abort", () => { clearTimeout(t); fail(new DOMException("aborted", "AbortError")); }, { once: true });
});

// The job's progress in #progress-box; the last job's count and time stay shown after it ends.
export function showProgress(job, units) {
  $("progress-box").hidden = false;
  $("progress").max = Math.max(1, job.total);
  $("progress").value = job.done;
  const counted = `${int(job.done)} / ${int(job.total)} ${units} · ${job.elapsed.toFixed(1)} s`;
  $("progress-text").textContent = job.status === "queued" ? `queued: waiting for memory other work holds · ${counted}` : counted;
}

// POST `path` (the job form, e.g. "/patch/jobs") with `body`, then GET `path/{id}` until the job ends,
// calling onProgress(job) after each answer. Resolves to the job's result; a failed or cancelled job
// throws with its error ("the NOUN failed: ..."). A 422 of the POST throws at once (ApiError: the
// request's fault, no job started).
export async function runJob(path, body, signal, onProgress, noun = "job") {
  let job = await apiPost(path, body, signal);
  onProgress(job);
  while (going(job)) {
    await pause(POLL_MS, signal);
    job = await apiGet(`${path}/${job.id}`, signal);
    onProgress(job);
  }
  if (job.status !== "done") throw new Error(`the ${noun} ${job.status}${job.error ? `: ${job.error}` : ""}`);
  return job.result;
}
