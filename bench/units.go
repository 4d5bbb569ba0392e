package main

import (
	"context"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/openatf/atf/shared/cost"
	"github.com/openatf/atf/shared/testkit/awsmeter"
)

// DynamoDB Local does not report what DynamoDB would charge (it leaves out index writes and
// transactions' double charge), so the benchmark computes capacity units from item sizes, by
// DynamoDB's published rules:
//
//   - a write costs 1 WRU per KB of the larger of the old and the new item, twice in a
//     transaction; a conditional write that fails still costs the item's units;
//   - each global index whose entry is added, changed or removed costs 1 WRU per KB of the entry
//     (keys, the table's keys and the projected attributes, plus 100 bytes); an entry whose keys
//     change is a delete and a put; index writes are counted as standard writes, not
//     transactional ones (as docs/capacity.md does);
//   - a read costs 1 RRU per 4 KB read, half for an eventually consistent one; a Query costs
//     the size of the entries it returns, at least one unit; BatchGetItem each key on its own.
//
// It keeps the last item written under each key to know the old item of the next write: every
// write of a run goes through a client that it watches, and the table starts empty.
type shadow struct {
	mu      sync.Mutex
	items   map[string]item
	indexes []gsi
	keys    []string // the table's key attributes
}

type item = map[string]types.AttributeValue

// gsi is a global index: its key attributes, the table's, and the attributes it projects.
type gsi struct{ keys, tableKeys, projected []string }

func newShadow(in *dynamodb.CreateTableInput) *shadow {
	s := &shadow{items: map[string]item{}}
	for _, k := range in.KeySchema {
		s.keys = append(s.keys, aws.ToString(k.AttributeName))
	}
	for _, ix := range in.GlobalSecondaryIndexes {
		g := gsi{tableKeys: s.keys}
		for _, k := range ix.KeySchema {
			g.keys = append(g.keys, aws.ToString(k.AttributeName))
		}
		if ix.Projection != nil {
			g.projected = ix.Projection.NonKeyAttributes
		}
		s.indexes = append(s.indexes, g)
	}
	return s
}

func (s *shadow) key(it item) string {
	var b strings.Builder
	for _, k := range s.keys {
		if v, ok := it[k].(*types.AttributeValueMemberS); ok {
			b.WriteString(v.Value)
		}
		b.WriteByte(0)
	}
	return b.String()
}

// writeUnits charges writing next over what the key held (nothing if next is nil: a delete),
// and remembers next if the write succeeded.
func (s *shadow) writeUnits(key string, next item, ok, transact bool) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.items[key]
	size := itemSize(next)
	if ok {
		size = max(size, itemSize(old))
	}
	units := kb(size, 1024)
	if transact {
		units *= 2
	}
	if !ok {
		return units
	}
	for _, g := range s.indexes {
		units += g.writeUnits(old, next)
	}
	if next == nil {
		delete(s.items, key)
	} else {
		s.items[key] = next
	}
	return units
}

// updated returns the item at key as in's update expression leaves it. It knows the clauses atf
// writes: SET a = :v, REMOVE a, and ADD a :n on numbers.
func (s *shadow) updated(key string, in *dynamodb.UpdateItemInput) item {
	s.mu.Lock()
	next := maps.Clone(s.items[key])
	s.mu.Unlock()
	if next == nil {
		next = maps.Clone(in.Key)
	}
	name := func(n string) string {
		if v, ok := in.ExpressionAttributeNames[n]; ok {
			return v
		}
		return n
	}
	clause, action := "", []string{}
	apply := func() {
		switch {
		case clause == "SET" && len(action) == 3 && action[1] == "=":
			next[name(action[0])] = in.ExpressionAttributeValues[action[2]]
		case clause == "REMOVE" && len(action) == 1:
			delete(next, name(action[0]))
		case clause == "ADD" && len(action) == 2:
			a := name(action[0])
			sum := 0.0
			if v, ok := next[a].(*types.AttributeValueMemberN); ok {
				sum, _ = strconv.ParseFloat(v.Value, 64)
			}
			if v, ok := in.ExpressionAttributeValues[action[1]].(*types.AttributeValueMemberN); ok {
				d, _ := strconv.ParseFloat(v.Value, 64)
				sum += d
			}
			next[a] = &types.AttributeValueMemberN{Value: strconv.FormatFloat(sum, 'f', -1, 64)}
		}
		action = action[:0]
	}
	expr := strings.NewReplacer(",", " , ", "=", " = ").Replace(aws.ToString(in.UpdateExpression))
	for _, word := range strings.Fields(expr) {
		switch word {
		case "SET", "REMOVE", "ADD", "DELETE":
			apply()
			clause = word
		case ",":
			apply()
		default:
			action = append(action, word)
		}
	}
	apply()
	return next
}

// entry is the index entry of it, or nil if it lacks the index's keys (a sparse index).
func (g gsi) entry(it item) item {
	for _, k := range g.keys {
		if _, ok := it[k]; !ok {
			return nil
		}
	}
	e := item{}
	for _, list := range [][]string{g.keys, g.tableKeys, g.projected} {
		for _, a := range list {
			if v, ok := it[a]; ok {
				e[a] = v
			}
		}
	}
	return e
}

func (g gsi) writeUnits(old, next item) float64 {
	o, n := g.entry(old), g.entry(next)
	size := func(e item) float64 { return kb(itemSize(e)+100, 1024) }
	switch {
	case o == nil && n == nil:
		return 0
	case o == nil:
		return size(n)
	case n == nil:
		return size(o)
	case !sameValues(o, n, g.keys):
		return size(o) + size(n)
	case sameValues(o, n, g.projected):
		return 0
	default:
		return max(size(o), size(n))
	}
}

func sameValues(a, b item, attrs []string) bool {
	for _, k := range attrs {
		if valueString(a[k]) != valueString(b[k]) {
			return false
		}
	}
	return true
}

func valueString(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + v.Value
	case *types.AttributeValueMemberN:
		return "N" + v.Value
	case *types.AttributeValueMemberB:
		return "B" + string(v.Value)
	case nil:
		return ""
	default:
		return "?"
	}
}

// kb is size in units of unit bytes, rounded up, at least one.
func kb(size, unit int) float64 { return math.Max(1, math.Ceil(float64(size)/float64(unit))) }

// itemSize is an item's size as DynamoDB counts it: each attribute's name and value.
func itemSize(it item) int {
	n := 0
	for name, v := range it {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

// numberSize is about 1 byte per 2 significant digits, plus 1.
func numberSize(s string) int {
	s = strings.TrimLeft(s, "+-")
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	s = strings.Trim(strings.Replace(s, ".", "", 1), "0")
	return (len(s)+1)/2 + 1
}

// probe watches one function's AWS clients: awsmeter counts its calls and the capacity the
// emulator reports; probe adds the units computed from item sizes, and tells apart the SQS
// receives that came back empty (the idle polling of an event source mapping).
type probe struct {
	meter  awsmeter.Meter
	shadow *shadow
	// consumed, if set, is told the units computed of each DynamoDB call that succeeded, with
	// its context: what DynamoDB would report, where DynamoDB Local reports none for a Query
	// that found nothing (dynamostore.ReportConsumed would pass on its figures).
	consumed func(ctx context.Context, u cost.Units)

	mu    sync.Mutex
	units map[awsmeter.Op]opUnits
}

// opUnits is what probe adds to awsmeter's counts for one operation.
type opUnits struct {
	Read, Write   float64 // computed
	EmptyReceives int
}

func newProbe(s *shadow) *probe { return &probe{shadow: s, units: map[awsmeter.Op]opUnits{}} }

// attach makes the clients built from cfg report to p.
func (p *probe) attach(cfg *aws.Config) {
	p.meter.Attach(cfg)
	cfg.APIOptions = append(cfg.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("benchunits", p.handle), middleware.After)
	})
}

func (p *probe) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleInitialize(ctx, in)
	op := awsmeter.Op{Service: awsmiddleware.GetServiceID(ctx), Operation: awsmiddleware.GetOperationName(ctx)}
	var u opUnits
	switch params := in.Parameters.(type) {
	case *dynamodb.PutItemInput:
		u.Write = p.shadow.writeUnits(p.shadow.key(params.Item), params.Item, err == nil, false)
	case *dynamodb.UpdateItemInput:
		key := p.shadow.key(params.Key)
		u.Write = p.shadow.writeUnits(key, p.shadow.updated(key, params), err == nil, false)
	case *dynamodb.DeleteItemInput:
		u.Write = p.shadow.writeUnits(p.shadow.key(params.Key), nil, err == nil, false)
	case *dynamodb.TransactWriteItemsInput:
		for _, ti := range params.TransactItems {
			if ti.Put != nil {
				u.Write += p.shadow.writeUnits(p.shadow.key(ti.Put.Item), ti.Put.Item, err == nil, true)
			}
		}
	case *dynamodb.GetItemInput:
		size := 0
		if r, ok := out.Result.(*dynamodb.GetItemOutput); ok && r != nil {
			size = itemSize(r.Item)
		}
		u.Read = readUnits(size, aws.ToBool(params.ConsistentRead))
	case *dynamodb.QueryInput:
		size := 0
		if r, ok := out.Result.(*dynamodb.QueryOutput); ok && r != nil {
			for _, it := range r.Items {
				size += itemSize(it)
			}
		}
		u.Read = readUnits(size, aws.ToBool(params.ConsistentRead))
	case *dynamodb.BatchGetItemInput:
		var got map[string][]item
		if r, ok := out.Result.(*dynamodb.BatchGetItemOutput); ok && r != nil {
			got = r.Responses
		}
		for table, ka := range params.RequestItems {
			found := got[table]
			for i := range ka.Keys {
				size := 0
				if i < len(found) { // responses come in any order; their sizes are alike
					size = itemSize(found[i])
				}
				u.Read += readUnits(size, aws.ToBool(ka.ConsistentRead))
			}
		}
	case *sqs.ReceiveMessageInput:
		if r, ok := out.Result.(*sqs.ReceiveMessageOutput); ok && r != nil && len(r.Messages) == 0 {
			u.EmptyReceives = 1
		}
	}
	if p.consumed != nil && err == nil && (u.Read > 0 || u.Write > 0) {
		p.consumed(ctx, cost.Units{Read: u.Read, Write: u.Write})
	}
	p.mu.Lock()
	c := p.units[op]
	c.Read += u.Read
	c.Write += u.Write
	c.EmptyReceives += u.EmptyReceives
	p.units[op] = c
	p.mu.Unlock()
	return out, md, err
}

// readUnits is a read of size bytes: 4 KB units, half if eventually consistent.
func readUnits(size int, consistent bool) float64 {
	u := kb(size, 4096)
	if !consistent {
		u /= 2
	}
	return u
}

// OpCount is one operation's calls and units in a snapshot of a probe.
type OpCount struct {
	Calls         float64 `json:"calls"`
	EmptyReceives float64 `json:"empty_receives,omitempty"`
	Read          float64 `json:"read_units,omitempty"`  // computed from item sizes
	Write         float64 `json:"write_units,omitempty"` // computed from item sizes
	ReportedRead  float64 `json:"reported_read_units,omitempty"`
	ReportedWrite float64 `json:"reported_write_units,omitempty"`
}

// snapshot returns what p recorded, by "Service.Operation".
func (p *probe) snapshot() map[string]OpCount {
	out := map[string]OpCount{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for op, c := range p.meter.Counts() {
		u := p.units[op]
		out[op.String()] = OpCount{
			Calls: float64(c.Calls), EmptyReceives: float64(u.EmptyReceives), Read: u.Read, Write: u.Write,
			ReportedRead: c.Read, ReportedWrite: c.Write,
		}
	}
	return out
}

func (p *probe) reset() {
	p.meter.Reset()
	p.mu.Lock()
	p.units = map[awsmeter.Op]opUnits{}
	p.mu.Unlock()
}

// diff returns a − b, operation by operation.
func diff(a, b map[string]OpCount) map[string]OpCount {
	out := map[string]OpCount{}
	for k, x := range a {
		y := b[k]
		d := OpCount{
			Calls: x.Calls - y.Calls, EmptyReceives: x.EmptyReceives - y.EmptyReceives, Read: x.Read - y.Read,
			Write: x.Write - y.Write, ReportedRead: x.ReportedRead - y.ReportedRead, ReportedWrite: x.ReportedWrite - y.ReportedWrite,
		}
		if d != (OpCount{}) {
			out[k] = d
		}
	}
	return out
}

// add returns a + b, operation by operation.
func add(a, b map[string]OpCount) map[string]OpCount {
	out := map[string]OpCount{}
	for _, m := range []map[string]OpCount{a, b} {
		for k, x := range m {
			y := out[k]
			out[k] = OpCount{
				Calls: x.Calls + y.Calls, EmptyReceives: x.EmptyReceives + y.EmptyReceives, Read: x.Read + y.Read,
				Write: x.Write + y.Write, ReportedRead: x.ReportedRead + y.ReportedRead, ReportedWrite: x.ReportedWrite + y.ReportedWrite,
			}
		}
	}
	return out
}
