// Package sqsworker is the handler of a worker function: an AWS Lambda function that an SQS
// event source mapping feeds with batches of task messages from one lambda's queues. Its main
// builds a Handler once and passes Handler.Handle to lambda.Start:
//
//	h, err := sqsworker.New(sqsworker.Config{Lambda: l, Handler: myHandler, Status: statusClient})
//	...
//	lambda.Start(h.Handle)
//
// Each record names a task (a task.Message; never the payload). The handler claims the task
// for the record's delivery (its receipt handle, so a claim the Lambda client retries gets the
// same lease) and runs it with the executor, exactly as a controller does under `atf dev` or on
// ECS: heartbeats, the handler's timeout, the outcome, and the stop before the lease can run out
// all come from shared/service/executor. A Go handler that ignores its context after that stop ends the
// process, and with it the invocation.
//
// # Partial batch responses
//
// The event source mapping must enable ReportBatchItemFailures. Handle then answers with the
// message ids of the records that must come back (batchItemFailures); every other record of the
// batch is deleted by Lambda. Handle never returns an error: that would send the whole batch
// back, including tasks that already ran. An empty or unknown itemIdentifier also fails the
// whole batch, so only the messageId of a record Lambda gave is ever reported.
//
// # Acknowledge or fail
//
// The store, not the queue, keeps a task alive: every status has a next trigger, and the
// consumer enqueues a task again when its message is lost. A task the schedule path sent ahead
// has its message sent before it is written, and no resend trigger until its claim: a claim
// settles its message, or fails and leaves it in the queue, and after MaxReceiveCount receives
// in the dead-letter queue, which the consumer drains (docs/guarantees.md, "Send, then write").
// So a message is acknowledged as soon as its claim is settled either way, and only a record
// whose claim never settled goes back:
//
//	record                                          answer
//	the task was claimed (whatever its handler did)  acknowledged: from the claim on, the store's
//	                                                 timeouts and backoff own retries
//	claim fails with task.ErrConflict                acknowledged: a duplicate message, or the
//	                                                 task is claimed, running or finished
//	claim fails with task.ErrNotFound                acknowledged: no such task (never, or no
//	                                                 longer, in the store; a message sent before
//	                                                 its task's create had its nonce buried
//	                                                 first, so that the create cannot land after)
//	claim fails with task.ErrNotDue (the task is     failed, and hidden until it is due if the
//	  not due yet by the status controller's clock,  refusal says when (task.DueAt), else for
//	  or its lease, timed by this message, lasts)    RetryDelay: it may be the task's only message
//	claim fails with task.ErrHeld (a limit holds     failed, and hidden until the limit may let it
//	  its start back; nothing was written)           start (executor.HoldDelay); from
//	                                                 executor.HoldResendAt receives, sent again so
//	                                                 delayed (Config.Queue is a Sender), and
//	                                                 acknowledged: a long hold never takes it to
//	                                                 the dead-letter queue
//	claim fails otherwise (store or status function  failed, and hidden for RetryDelay only: SQS
//	  unreachable, throttled, ...)                   delivers it again in seconds
//	less than Margin left before the deadline        failed, not claimed, hidden for RetryDelay
//	claimed, but the claim took the time left        acknowledged: the task is released untried
//	body is not a task message, has no task id, or  failed: poison. After MaxReceiveCount
//	  names another lambda                           receives the redrive policy moves it to the
//	                                                 dead-letter queue, where people and alarms
//	                                                 see it, as sqsqueue does for the executors
//
// A claim that failed without a refusal may have been written all the same: the executor hands
// it back (unclaim) before the record is failed, so that its attempt is not spent on a run that
// never started (docs/guarantees.md).
//
// A record failed for a transient reason would otherwise come back only after the queue's
// visibility timeout, six times the function's: minutes. So, when Config.Queue is set (the worker
// function sets it), Handle first hides its message for RetryDelay (2 s, doubling on each receive,
// at most a minute) with ChangeMessageVisibility, best effort and bounded by a short deadline.
// The doubling keeps a long outage of the status function from sending messages to the
// dead-letter queue in a minute; a message that goes there anyway costs nothing but an alarm,
// since the consumer enqueues its task again. Poison keeps the queue's timeout.
//
// Poison is failed rather than acknowledged because the dead-letter queue is where the design
// puts it: a body that does not decode is a bug (or a hand-sent message) that deserves more than
// a log line, and failing it costs nothing else: partial batch responses return only that record,
// and the task it meant, if any, is enqueued again by the consumer after its enqueue timeout.
//
// # The deadline margin
//
// A worker function has until its invocation deadline (ctx.Deadline()); after it the function is
// frozen mid-call, and a task it held is left processing until its heartbeat timeout, when the
// consumer counts the attempt as lost. Handle therefore stops work Margin before the deadline,
// while there is still time to stop the handler (a program is killed within two seconds) and to
// report to the status controller (the executor gives that call ten seconds): DefaultMargin
// covers both. The stack must set the function timeout to the lambda's Timeout plus Margin at
// least (and at most the 900 s Lambda allows), and BatchSize to at most the lambda's
// Concurrency, so that no record waits for a slot.
//
// A record whose turn comes with less than Margin left is not claimed: it is reported failed and
// comes back. A claimed task runs with a context that ends Margin before the deadline. Two cases:
//
//   - The function's time leaves the handler its full Timeout, as the stack configures it. A
//     handler cut short by the margin then started late (it waited for a slot, or its claim was
//     slow): not the task's fault. The executor releases the task, the attempt does not count,
//     and the consumer enqueues it again at once.
//   - The function's time at the start of the invocation is shorter than Timeout plus Margin:
//     the function is configured too short for this lambda. The handler's timeout is then cut to
//     the time the function has left, and running out of it counts as a timed-out attempt like
//     any other. Releasing instead would run a task that needs more time than the function has
//     again and again, never counting an attempt and never reaching dead. The handler logs a
//     warning of it once per function instance, not once per batch.
//
// "Full" allows Slack (DefaultSlack, a second): the stack sizes the function at exactly Timeout
// plus Margin, and Lambda's clock starts before Handle sees the event. So an invocation short by
// less than Slack is not too short, and a record claimed with at least Timeout less Slack left
// gets the time left as its timeout, counted when it runs out like any timeout: only a record
// that started later than that (it waited for a slot) is released when the margin cuts it.
//
// # Concurrency
//
// Records run at once up to the lambda's Concurrency, in the order of the batch. Concurrency is
// the lambda owner's bound on the handlers one runner holds at once (the memory and CPU of one
// function instance are sized for it), so a batch larger than that queues inside the invocation
// instead of overloading it. Across invocations, the event source mappings' MaximumConcurrency
// bounds the lambda as a whole.
package sqsworker
