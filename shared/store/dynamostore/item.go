package dynamostore

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/openatf/atf/shared/task"
)

// Attribute names. They are short because every byte of an item counts towards its write units.
const (
	attrPK          = "pk"
	attrSK          = "sk"
	attrDuePK       = "due_pk"
	attrDueSK       = "due_sk"
	attrListPK      = "list_pk"
	attrListSK      = "list_sk"
	attrFailedPK    = "fail_pk" // present only on a task that failed for good (task.Failed)
	attrFailedSK    = "fail_sk"
	attrExpires     = "expires" // TTL, epoch seconds; set on terminal tasks only
	attrLambda      = "lambda"
	attrID          = "id"
	attrCollection  = "coll"
	attrKey         = "tkey" // S, present only when set: the task's key (task.Task.Key)
	attrPriority    = "prio"
	attrStatus      = "status"
	attrPayload     = "payload" // inline in the task item if small, else in the payload item
	attrPayloadRef  = "pl"      // on a task item whose payload has an item of its own: its key
	attrResult      = "result"
	attrError       = "error"
	attrAttempts    = "attempts"
	attrMaxAttempts = "max_attempts"
	attrRunAt       = "run_at"
	attrDeadline    = "deadline"
	attrNextTrigger = "next_at"
	attrCreatedAt   = "created_at"
	attrUpdatedAt   = "updated_at"
	attrVersion     = "version"
	attrLease       = "lease"
	attrSpec        = "spec"
	attrMode        = "mode"
	attrParked      = "parked" // BOOL, present only when true
	attrCancel      = "cxl"    // BOOL, present only when true: a running task's cancel was accepted
	attrNotBefore   = "nb"     // N, unix nanoseconds: an enqueued task sent ahead is not claimed before
	attrHandBacks   = "hb"     // N, present only when not 0: the claims of the attempt handed back
	attrSnoozes     = "snz"    // N, present only when not 0: the runs of this life snoozed
	attrMessage     = "qm"     // S: the message the latest claim named to time its lease
	attrMessageFor  = "qml"    // S: the lease it times
	attrRateSlot    = "rs"     // N, unix nanoseconds: the start a held claim booked (task.Task.RateSlot)
	// The latest attempt (task.Task.AttemptSeq, StartedAt, EndedAt, Worker), each present only
	// when set; an attempt item (history.go) has them too, and attrOutcome.
	attrAttemptSeq = "aseq" // N
	attrStartedAt  = "st"   // N, unix nanoseconds
	attrEndedAt    = "en"   // N, unix nanoseconds
	attrWorker     = "wk"   // S
	// Where the latest attempt's logs are (task.Task.LogLocation; logAttrs), each present only
	// when known; an attempt item has them too.
	attrLogGroup  = "lgg" // S
	attrLogStream = "lgs" // S, absent when it is the worker's name, as a worker function's is
	attrRequestID = "rid" // S
	// Task flows (see flow.go); each present only on a task that has it.
	attrAfterCount   = "after_n" // N: how many upstreams the task waits for (Task.AfterCount)
	attrAfterRef     = "aref"    // S: names the task's after-list chunk items, random per write of the list
	attrTrigger      = "trig"    // S: the trigger rule, if not the default
	attrSettled      = "settled" // B: the settled upstreams' bitmap
	attrDownstream   = "down"    // BOOL: other tasks wait for this one
	attrNotifyCursor = "ncur"    // S: how far the consumer got telling the downstreams
	attrRefs         = "refs"    // S, on an after-list chunk item: its upstreams
	attrIndex        = "i"       // N, on an edge item: the upstream's index in the downstream's After
	// attrTomb is the set of nonces (SS) on a tombstone: an item at a task's key, and no task,
	// that Bury writes for the messages that found no task there (see tombstone.go).
	attrTomb = "tomb"
)

// Index names and the attributes they project besides the keys.
const (
	// DueIndex holds one entry per task that has a next trigger (sparse: terminal tasks leave it).
	DueIndex = "due"
	// ListIndex holds one entry per task, in creation order, for lists. Its keys and what it
	// projects never change, so Create writes its entry and no transition rewrites it. It
	// replaced the index "list", which projected the status too (docs/data-model.md, Upgrading):
	// a projection cannot change in place, and a new name makes a store and a table of
	// different versions fail loudly rather than list by a status the index does not hold.
	ListIndex = "list2"
	// FailedIndex holds one entry per task that failed for good (sparse: task.Failed only), of
	// every lambda, latest updated first: the dead letters across lambdas (ListFailed).
	FailedIndex = "failed"
)

var (
	// The due entry moves (its sort key changes) at every transition that changes one of these,
	// so projecting them costs no write: sweeps filter on them before reading a task.
	dueProjection = []string{attrID, attrStatus, attrCollection, attrPriority}
	// The list entry projects the collection alone, which never changes: the id is in the sort
	// key, and a status filter reads the task items (List).
	listProjection = []string{attrCollection}
	// The failed entry projects nothing but its keys: its status is in its partition key, its
	// lambda and id in its sort key, and a page reads its task items anyway.
	failedProjection []string
)

// Key values. '#' separates the parts: lambda and priority names, ids and collections never hold
// one (task.ValidateName and task.ValidateID).
const (
	taskSK = "task"
	// payloadSK prefixes the sort key of a payload item: payload#<ref>, beside the task item
	// under the task's pk. The ref is random per Create, so a failed or racing Create never
	// touches the payload of the task that won.
	payloadSK  = "payload#"
	gatePK     = "gate"
	laneRun    = "r" // claimed and processing tasks, whatever their priority
	laneResend = "e" // enqueued tasks, whatever their priority: due when their message may be lost
	laneWait   = "w" // waiting tasks not yet enqueued (new, retriable), by priority
	laneParked = "p" // waiting tasks a gate parked, by collection
	// laneFlow holds the tasks of flows the consumer looks at each pass: pending tasks due for
	// their check, and ended tasks whose downstreams are still to be told. One lane, so that a
	// pass reads both with one query per shard; Due tells them apart by status.
	laneFlow    = "f"
	lanePending = laneFlow
	laneNotify  = laneFlow
)

func taskPK(lambda, id string) string { return "task#" + lambda + "#" + id }

// LambdaKeyPatterns are the partition keys of one lambda's items that a status controller reads
// and writes, as IAM dynamodb:LeadingKeys patterns (StringLike): its tasks' items, task and
// payload (task#<lambda>#<id>), its counters (count#<lambda>#<shard>) and the records of its
// limits (limit#<lambda>#<limit>, limits.go). A name never holds
// '#', so no other lambda's keys match. The stack grants a lambda's status function and executor
// the table with these alone.
func LambdaKeyPatterns(lambda string) []string {
	return []string{taskPK(lambda, "*"), "count#" + lambda + "#*", "limit#" + lambda + "#*"}
}

func duePK(lambda string, shard int) string  { return "due#" + lambda + "#" + strconv.Itoa(shard) }
func listPK(lambda string, shard int) string { return "list#" + lambda + "#" + strconv.Itoa(shard) }

// stamp is a time as 19 zero-padded digits of unix nanoseconds, so that strings sort as times.
func stamp(t time.Time) string { return fmt.Sprintf("%019d", t.UnixNano()) }

// dueSK orders a lambda shard's due entries by lane, then trigger time, then id: a waiting task
// sits at w#<priority>#<trigger>#<id>, an enqueued one at e#<trigger>#<id>, a running one at
// r#<trigger>#<id>, a parked one at p#<collection>#<trigger>#<id>. An enqueue moves a task's
// entry anyway (its trigger changes), so its lane of its own costs no write. Task flows add two
// lanes: a pending task due for its check at b#<trigger>#<id>, and an ended task whose downstreams
// are still to be told at n#<trigger>#<id>. A task without upstreams or downstreams is in neither.
func dueSK(t task.Task) string {
	lane := laneOf(t.Status)
	switch {
	case t.Parked && lane != laneRun && lane != laneNotify:
		return laneParked + "#" + t.Collection + "#" + stamp(*t.NextTriggerAt) + "#" + t.ID
	case lane == laneWait:
		return laneWait + "#" + t.Priority + "#" + stamp(*t.NextTriggerAt) + "#" + t.ID
	}
	return lane + "#" + stamp(*t.NextTriggerAt) + "#" + t.ID
}

func listSK(t task.Task) string { return stamp(t.CreatedAt) + "#" + t.ID }

func isRunning(s task.Status) bool { return s == task.StatusClaimed || s == task.StatusProcessing }

// shardOf spreads a lambda's tasks over n index partitions by a hash of the id.
func shardOf(id string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id)) // a hash never fails to write
	return int(h.Sum32() % uint32(n))
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// InlinePayload is the largest payload kept inside the task item. A larger one gets an item of
// its own, written once at Create: every transition rewrites the task item, and DynamoDB charges
// a write by the whole item (an UpdateItem by the larger of its sizes before and after), so a
// payload in the task item would cost one write unit per KB at every heartbeat. Up to this size
// the task item stays within one write unit, and a second item would cost more than it saves.
const InlinePayload = 400

// stateAttrs are the attributes of a task item that transitions write: all but the keys and the
// payload, which never changes after Create. Update removes those a task does not have.
var stateAttrs = []string{
	attrDuePK, attrDueSK, attrListPK, attrListSK, attrFailedPK, attrFailedSK, attrExpires, attrLambda, attrID,
	attrCollection, attrPriority, attrStatus, attrResult, attrError, attrAttempts,
	attrMaxAttempts, attrRunAt, attrDeadline, attrNextTrigger, attrCreatedAt, attrUpdatedAt,
	attrVersion, attrLease, attrSpec, attrParked, attrSettled, attrDownstream, attrNotifyCursor,
	attrCancel, attrNotBefore, attrHandBacks, attrAttemptSeq, attrStartedAt, attrEndedAt, attrWorker,
	attrLogGroup, attrLogStream, attrRequestID,
	attrSnoozes, attrMessage, attrMessageFor, attrKey, attrRateSlot,
}

// marshalState returns the task item's state attributes (stateAttrs): the task without its keys
// and payload, and its index keys. Empty strings and absent values are left out: it keeps the
// item small.
func (st *Store) marshalState(t task.Task) map[string]types.AttributeValue {
	shard := shardOf(t.ID, st.shards(t.Lambda))
	item := map[string]types.AttributeValue{
		attrListPK: s(listPK(t.Lambda, shard)), attrListSK: s(listSK(t)),
		attrLambda: s(t.Lambda), attrID: s(t.ID), attrPriority: s(t.Priority),
		attrStatus: s(string(t.Status)), attrAttempts: n(int64(t.Attempts)),
		attrMaxAttempts: n(int64(t.MaxAttempts)), attrVersion: n(t.Version),
	}
	for name, v := range map[string]string{attrCollection: t.Collection, attrError: t.Error, attrLease: t.Lease, attrSpec: t.Spec, attrNotifyCursor: t.NotifyCursor, attrWorker: t.Worker, attrMessage: t.Message, attrMessageFor: t.MessageFor, attrKey: t.Key} {
		if v != "" {
			item[name] = s(v)
		}
	}
	if len(t.Result) > 0 {
		item[attrResult] = &types.AttributeValueMemberB{Value: t.Result}
	}
	for name, v := range map[string]*time.Time{attrRunAt: &t.RunAt, attrCreatedAt: &t.CreatedAt, attrUpdatedAt: &t.UpdatedAt, attrDeadline: t.Deadline, attrNextTrigger: t.NextTriggerAt, attrNotBefore: t.NotBefore, attrStartedAt: t.StartedAt, attrEndedAt: t.EndedAt, attrRateSlot: t.RateSlot} {
		if v != nil && !v.IsZero() {
			item[name] = n(v.UnixNano())
		}
	}
	if t.Parked {
		item[attrParked] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if t.Downstream {
		item[attrDownstream] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if t.CancelRequested {
		item[attrCancel] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if t.HandBacks != 0 {
		item[attrHandBacks] = n(int64(t.HandBacks))
	}
	if t.AttemptSeq != 0 {
		item[attrAttemptSeq] = n(int64(t.AttemptSeq))
	}
	logAttrs(item, t.LogLocation, t.Worker)
	if t.Snoozes != 0 {
		item[attrSnoozes] = n(int64(t.Snoozes))
	}
	if len(t.Settled) > 0 {
		item[attrSettled] = &types.AttributeValueMemberB{Value: t.Settled}
	}
	// A task created after its message was sent (Nonce) needs no resend trigger in the index:
	// its message cannot be missing (docs/guarantees.md, "Send, then write"). Nor does a running
	// task whose lease its hidden message times (Message): the message's return times it out
	// ("The queue as the lease timer").
	if t.NextTriggerAt != nil && t.Nonce == "" && !t.LeaseOnQueue() {
		item[attrDuePK] = s(duePK(t.Lambda, shard))
		item[attrDueSK] = s(dueSK(t))
	}
	if slices.Contains(task.Failed, t.Status) {
		item[attrFailedPK] = s(failedPK(t.Status, t.Lambda, t.ID))
		item[attrFailedSK] = s(failedSK(t))
	}
	if t.Status.Terminal() {
		item[attrExpires] = n(st.expires(t))
	}
	return item
}

// expires is the TTL of a finished task's items, in epoch seconds.
func (st *Store) expires(t task.Task) int64 {
	at := t.UpdatedAt
	if at.IsZero() {
		at = st.now()
	}
	return at.Add(st.cfg.Retention).Unix()
}

// marshal returns the items of a new task: the task item, the payload item if the payload is
// over InlinePayload (nil otherwise), and the chunk items of its After (see flow.go). ref names
// the payload item and the chunks; the task item points to them.
func (st *Store) marshal(t task.Task, ref string) (taskItem, payloadItem map[string]types.AttributeValue, chunks []map[string]types.AttributeValue) {
	pk := s(taskPK(t.Lambda, t.ID))
	taskItem = st.marshalState(t)
	taskItem[attrPK], taskItem[attrSK] = pk, s(taskSK)
	if t.Trigger != "" {
		taskItem[attrTrigger] = s(t.Trigger)
	}
	if len(t.After) > 0 {
		taskItem[attrAfterCount], taskItem[attrAfterRef] = n(int64(len(t.After))), s(ref)
		chunks = afterChunks(t, ref)
		if t.Status.Terminal() {
			for _, c := range chunks {
				c[attrExpires] = taskItem[attrExpires]
			}
		}
	}
	switch {
	case len(t.Payload) > InlinePayload:
		taskItem[attrPayloadRef] = s(ref)
		payloadItem = map[string]types.AttributeValue{
			attrPK: pk, attrSK: s(payloadSK + ref), attrPayload: &types.AttributeValueMemberB{Value: t.Payload},
		}
		if t.Status.Terminal() {
			payloadItem[attrExpires] = taskItem[attrExpires]
		}
	case len(t.Payload) > 0:
		taskItem[attrPayload] = &types.AttributeValueMemberB{Value: t.Payload}
	}
	return taskItem, payloadItem, chunks
}

// unmarshal reads a task item back. ref names its payload item, if the payload has one: the
// task's Payload is then still to be read from it.
func unmarshal(item map[string]types.AttributeValue) (t task.Task, ref string, err error) {
	str := func(name string) string {
		if v, ok := item[name].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		return ""
	}
	num := func(name string) int64 {
		v, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			return 0
		}
		i, perr := strconv.ParseInt(v.Value, 10, 64)
		if perr != nil && err == nil {
			err = fmt.Errorf("attribute %s: %w", name, perr)
		}
		return i
	}
	tm := func(name string) *time.Time {
		if _, ok := item[name]; !ok {
			return nil
		}
		v := time.Unix(0, num(name)).UTC()
		return &v
	}
	val := func(p *time.Time) time.Time {
		if p == nil {
			return time.Time{}
		}
		return *p
	}
	bin := func(name string) []byte {
		if v, ok := item[name].(*types.AttributeValueMemberB); ok {
			return v.Value
		}
		return nil
	}
	t.ID, t.Lambda, t.Collection, t.Priority = str(attrID), str(attrLambda), str(attrCollection), str(attrPriority)
	t.Status, t.Error, t.Lease, t.Spec = task.Status(str(attrStatus)), str(attrError), str(attrLease), str(attrSpec)
	t.Payload, t.Result = bin(attrPayload), bin(attrResult)
	t.Attempts, t.MaxAttempts, t.Version = int(num(attrAttempts)), int(num(attrMaxAttempts)), num(attrVersion)
	t.RunAt, t.CreatedAt, t.UpdatedAt = val(tm(attrRunAt)), val(tm(attrCreatedAt)), val(tm(attrUpdatedAt))
	t.Deadline, t.NextTriggerAt, t.NotBefore = tm(attrDeadline), tm(attrNextTrigger), tm(attrNotBefore)
	t.RateSlot = tm(attrRateSlot)
	if v, ok := item[attrParked].(*types.AttributeValueMemberBOOL); ok {
		t.Parked = v.Value
	}
	if v, ok := item[attrDownstream].(*types.AttributeValueMemberBOOL); ok {
		t.Downstream = v.Value
	}
	if v, ok := item[attrCancel].(*types.AttributeValueMemberBOOL); ok {
		t.CancelRequested = v.Value
	}
	t.HandBacks, t.Snoozes = int(num(attrHandBacks)), int(num(attrSnoozes))
	t.Message, t.MessageFor, t.Key = str(attrMessage), str(attrMessageFor), str(attrKey)
	t.AttemptSeq, t.StartedAt, t.EndedAt, t.Worker = int(num(attrAttemptSeq)), tm(attrStartedAt), tm(attrEndedAt), str(attrWorker)
	t.LogLocation = logLocation(item, t.Worker)
	t.AfterCount, t.Trigger, t.Settled, t.NotifyCursor = int(num(attrAfterCount)), str(attrTrigger), bin(attrSettled), str(attrNotifyCursor)
	if t.ID == "" || t.Lambda == "" {
		return task.Task{}, "", fmt.Errorf("item %s is not a task", str(attrPK))
	}
	return t, str(attrPayloadRef), err
}

// parseStamp reads the trigger time and id at the end of a due or list sort key.
func parseStamp(sk string) (nanos int64, id string, ok bool) {
	parts := strings.Split(sk, "#")
	if len(parts) < 2 {
		return 0, "", false
	}
	id = parts[len(parts)-1]
	nanos, err := strconv.ParseInt(parts[len(parts)-2], 10, 64)
	return nanos, id, err == nil && len(parts[len(parts)-2]) == 19 && id != ""
}

// logAttrs sets the attributes of l, where the logs of an attempt by worker are, on item: the
// stream only if it is not the worker's name, which a worker function's is, so that the item
// does not carry it twice.
func logAttrs(item map[string]types.AttributeValue, l *task.LogLocation, worker string) {
	if l == nil || l.Group == "" {
		return
	}
	item[attrLogGroup] = s(l.Group)
	if l.Stream != "" && l.Stream != worker {
		item[attrLogStream] = s(l.Stream)
	}
	if l.RequestID != "" {
		item[attrRequestID] = s(l.RequestID)
	}
}

// logLocation reads back what logAttrs set on item for worker, or nil.
func logLocation(item map[string]types.AttributeValue, worker string) *task.LogLocation {
	group := str(item, attrLogGroup)
	if group == "" {
		return nil
	}
	l := &task.LogLocation{Group: group, Stream: str(item, attrLogStream), RequestID: str(item, attrRequestID)}
	if l.Stream == "" {
		l.Stream = worker
	}
	return l
}
