// Package soak runs `linger serve` as a user would for about a minute and
// proves that it keeps what it promises under load, with real kernel
// processes and real files:
//
//   - every timeline viewer of a busy kernel receives every event of its
//     trace exactly once (no sequence gap, no duplicate), whether it
//     keeps up (JSON, no acks) or falls behind and is caught up with
//     summaries and their backfill, as the browser is;
//   - a kernel killed with kill -9 mid-cell ends its viewers' streams
//     cleanly (an end message naming the kill, then a normal close), and
//     its trace file reads to its last frame, holding exactly the events
//     the viewers received;
//   - a notebook saved while the server is killed with SIGKILL is, after a
//     restart, exactly the last version saved or the one in flight, never
//     a torn mix;
//   - once the kernels are shut down and the viewers gone, the server's
//     goroutines and Go heap return to about their idle level, read from
//     its own /metrics.
//
// The package has only tests; TestMain builds the linger binary once.
package soak
