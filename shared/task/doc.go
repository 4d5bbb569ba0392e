// Package task is the domain of atf: tasks, their states and the transitions between them,
// lease tokens, backoff, validation, error sentinels, configuration, and the Store and Queue
// interfaces that every backend implements.
//
// Public surface: a lambda owner imports task, worker and client (and workerfn in a Go handler's
// main); every other package under shared/ is the framework's own. See the README's Folders.
//
// It imports only the standard library. Everything here is a pure function of its inputs (the
// clock and randomness are passed in), so the state machine is tested without I/O.
//
// # States
//
// Every non-terminal state has a next trigger: the time at which the store consumer looks at the
// task again. That is how a task lost anywhere (a dropped queue message, a crashed executor, a
// failed call) is found and run again.
//
//	status             next trigger                          meaning
//	pending            none                                  waits for upstream tasks
//	new                run_at (snoozed: snoozed_at + delay)  scheduled, not yet enqueued
//	enqueued           enqueued_at + enqueue timeout         in its queue; re-enqueued if never claimed
//	processing         heartbeat_at + heartbeat timeout      a worker owns it (from its claim on);
//	                                                         re-enqueued if heartbeats stop
//	retriable_failure  failed_at + backoff(attempt), or the  will run again
//	                   handler's delay (RetryAfter)
//	success, fatal_failure, dead, cancelled, dropped: terminal, no trigger
//
// claimed (claimed_at + claim timeout) is no longer written: a claim starts its task. Older
// versions claimed into it and started with a first heartbeat, so a task may still hold it; it
// is handled as processing.
//
// Every transition bumps the task's Version; stores write a transition only if the stored version
// is still the one it was computed from. That conditional write is where duplicates die.
package task
