// Package modeltest holds a model-based test of the task lifecycle, written with
// pgregory.net/rapid. It has no code of its own: nothing imports it, and its tests build the real
// components (the embedded store, the in-process queue, the frontend, the store consumer and the
// status controller) on a fake clock.
//
// Each check drives them through a random sequence of schedule, sweep, advance-clock, deliver,
// claim, heartbeat, complete, release, cancel, gate, duplicate and lost messages, crashed
// workers, process restarts and races, and after every step checks the guarantees: no task is
// lost, no two accepted executions of a task overlap, lease tokens never go backwards, a terminal
// state never changes, and attempts never exceed the maximum. A final drain, in which workers
// behave, shows that every task ends.
//
//	go test ./shared/testkit/modeltest                   # 100 checks of about 100 steps (10 with -race)
//	go test ./shared/testkit/modeltest -rapid.checks=2000 -rapid.steps=300
//
// A failure prints the shrunk sequence of steps and the seed to reproduce it with -rapid.seed.
package modeltest
