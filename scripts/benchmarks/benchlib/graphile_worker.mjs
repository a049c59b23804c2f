// One Graphile Worker process for scripts/benchmarks/bench.py (benchlib/peers_graphile.py starts it from
// the temporary folder graphile-worker was installed into). Its DSN comes from the environment
// (BENCH_PEER_DSN), never argv. BENCH_BATCH > 1 turns on Graphile's own batching: a local queue
// of that many jobs fetched at once and completions batched within a tick, the settings its
// documentation gives for throughput; 1 leaves both off (its defaults). BENCH_PEER_RECORD_START
// makes the task's first statement stamp bench_started (pickup latency), through Graphile's
// own pool.
import { run } from "graphile-worker";

const batch = Number(process.env.BENCH_BATCH || "1");
const record = Boolean(process.env.BENCH_PEER_RECORD_START);
const concurrentJobs = Number(process.env.BENCH_CONCURRENCY || String(Math.max(1, batch)));

const taskList = {
  noop: record
    ? async (_payload, helpers) => {
        await helpers.query(
          "INSERT INTO bench_started (job_id, at) VALUES ($1, clock_timestamp())",
          [helpers.job.id],
        );
      }
    : async () => {},
};

const worker = {
  connectionString: process.env.BENCH_PEER_DSN,
  concurrentJobs,
  maxPoolSize: Math.max(10, concurrentJobs + 2),
  pollInterval: 2000,
};
if (batch > 1) {
  worker.localQueue = { size: batch };
  worker.completeJobBatchDelay = 0;
}

const runner = await run({ preset: { worker }, taskList, noHandleSignals: false });
await runner.addJob; // started
const { Client } = await import("pg");
const ready = new Client({ connectionString: process.env.BENCH_PEER_DSN });
await ready.connect();
await ready.query("INSERT INTO bench_ready (pid, at) VALUES ($1, clock_timestamp())", [process.pid]);
await ready.end();
await runner.promise;
