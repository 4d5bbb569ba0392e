package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/openatf/atf/shared/store/dynamostore"
)

// store is the task store: the table that shared/store/dynamostore reads and writes (see
// docs/data-model.md). Its keys and indexes are dynamostore.TableInput's, translated here, so the
// deployed table is the one `atf dev --backend aws --create` and the tests make.
//
// The core stack makes the table; a lambda stack uses it by its name (importStore), so that no
// export ties the stacks together.
type store struct {
	table awsdynamodb.ITable
}

// importStore is the core's table in a lambda stack: its ARN built from the known name atf-<env>.
func importStore(scope constructs.Construct, id string, d *deployment) *store {
	return &store{table: awsdynamodb.Table_FromTableAttributes(scope, jsii.String(id), &awsdynamodb.TableAttributes{
		TableArn: d.arn("dynamodb", "table", d.prefix),
	})}
}

func newStore(scope constructs.Construct, id string, d *deployment) *store {
	c := constructs.NewConstruct(scope, jsii.String(id))
	in := dynamostore.TableInput(d.prefix)
	if in.BillingMode != types.BillingModePayPerRequest {
		panic(fmt.Errorf("dynamostore.TableInput: billing mode %s; the stack bills the table as its environment says", in.BillingMode))
	}
	// On demand, or provisioned from the environment's minimum, which auto scaling then moves.
	billing := awsdynamodb.BillingMode_PAY_PER_REQUEST
	var read, write *float64
	capacity := d.env.provisioned()
	if capacity != nil {
		billing = awsdynamodb.BillingMode_PROVISIONED
		read, write = jsii.Number(capacity.Read.Min), jsii.Number(capacity.Write.Min)
	}
	attrTypes := map[string]types.ScalarAttributeType{}
	for _, a := range in.AttributeDefinitions {
		attrTypes[*a.AttributeName] = a.AttributeType
	}
	attr := func(name string) *awsdynamodb.Attribute {
		t, ok := map[types.ScalarAttributeType]awsdynamodb.AttributeType{
			"S": awsdynamodb.AttributeType_STRING, "N": awsdynamodb.AttributeType_NUMBER, "B": awsdynamodb.AttributeType_BINARY,
		}[attrTypes[name]]
		if !ok {
			panic(fmt.Errorf("dynamostore.TableInput: attribute %s has type %q", name, attrTypes[name]))
		}
		return &awsdynamodb.Attribute{Name: jsii.String(name), Type: t}
	}
	pk, sk := keys(in.KeySchema)
	table := awsdynamodb.NewTable(c, jsii.String("Table"), &awsdynamodb.TableProps{
		TableName:     in.TableName,
		BillingMode:   billing,
		ReadCapacity:  read,
		WriteCapacity: write,
		PartitionKey:  attr(pk),
		SortKey:       attr(sk),
		// Finished tasks carry their expiry; DynamoDB deletes them some time after it.
		TimeToLiveAttribute: jsii.String(dynamostore.TTLAttribute),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(d.env.PITR),
		},
		DeletionProtection: jsii.Bool(d.env.Retain),
		RemovalPolicy:      d.removal,
	})
	for _, g := range in.GlobalSecondaryIndexes {
		pk, sk := keys(g.KeySchema)
		props := &awsdynamodb.GlobalSecondaryIndexProps{IndexName: g.IndexName, PartitionKey: attr(pk), SortKey: attr(sk), ReadCapacity: read, WriteCapacity: write}
		switch g.Projection.ProjectionType {
		case types.ProjectionTypeInclude:
			props.ProjectionType, props.NonKeyAttributes = awsdynamodb.ProjectionType_INCLUDE, jsii.Strings(g.Projection.NonKeyAttributes...)
		case types.ProjectionTypeKeysOnly:
			props.ProjectionType = awsdynamodb.ProjectionType_KEYS_ONLY
		default:
			panic(fmt.Errorf("dynamostore.TableInput: index %s projects %s; the stack knows INCLUDE and KEYS_ONLY", *g.IndexName, g.Projection.ProjectionType))
		}
		table.AddGlobalSecondaryIndex(props)
	}
	if capacity != nil {
		autoscale(table, in.GlobalSecondaryIndexes, capacity)
	}
	if !d.env.PITR {
		suppress(table, "AwsSolutions-DDB3", "Point-in-time recovery is off by this environment's configuration (pitr): its tasks are disposable.")
	}
	return &store{table: table}
}

// autoscale has Application Auto Scaling move the read and the write capacity of the table and of
// each index, each on its own, between the environment's bounds, so that the units consumed stay
// at its target utilization: an index that takes few writes (failed) stays at the minimum.
func autoscale(table awsdynamodb.Table, indexes []types.GlobalSecondaryIndex, c *Capacity) {
	target := &awsdynamodb.UtilizationScalingProps{TargetUtilizationPercent: jsii.Number(c.TargetUtilizationPercent)}
	read := &awsdynamodb.EnableScalingProps{MinCapacity: jsii.Number(c.Read.Min), MaxCapacity: jsii.Number(c.Read.Max)}
	write := &awsdynamodb.EnableScalingProps{MinCapacity: jsii.Number(c.Write.Min), MaxCapacity: jsii.Number(c.Write.Max)}
	table.AutoScaleReadCapacity(read).ScaleOnUtilization(target)
	table.AutoScaleWriteCapacity(write).ScaleOnUtilization(target)
	for _, g := range indexes {
		table.AutoScaleGlobalSecondaryIndexReadCapacity(g.IndexName, read).ScaleOnUtilization(target)
		table.AutoScaleGlobalSecondaryIndexWriteCapacity(g.IndexName, write).ScaleOnUtilization(target)
	}
}

// The DynamoDB actions of each role: those its code calls through shared/store/dynamostore, and no
// more. TransactWriteItems is authorized item by item, as PutItem. Scans, batch writes, streams
// and table management are left out of all.
var (
	// apiActions: the API function runs the task.Store methods a client reaches: creates
	// (PutItem; DeleteItem tidies the payload items of a rejected create; UpdateItem counts),
	// reads, lists and counts (GetItem, Query, BatchGetItem), cancels (UpdateItem), and gates
	// (PutItem, and DeleteItem to open one). It and the consumer are the roles with DeleteItem.
	// Task flows add BatchWriteItem: the edges under the upstreams and the after-list chunks.
	apiActions = []string{"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
	// consumerActions: sweeps query the due index and the gates, lists the list index (Query),
	// re-read hits and counters (BatchGetItem), and move tasks and counters (UpdateItem).
	// Task flows add GetItem: a downstream's after-list chunk, to check an edge.
	// Periodic schedules add PutItem and DeleteItem: a firing creates its task as the API does
	// (PutItem; DeleteItem tidies the payload item of a create that found the firing's task made
	// by another consumer) and advances its schedule (a conditional PutItem).
	consumerActions = []string{"dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:UpdateItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"}
	// statusActions: a status controller (a lambda's status function, an ecs lambda's executor)
	// reads one task (GetItem) and moves it, its counter and its payload item's TTL (UpdateItem);
	// a claim that finds no task writes its tombstone (UpdateItem, dynamostore.Store.Bury).
	// Task flows add Query: a claimed task's after-list chunks, under its own key. Limits add
	// ConditionCheckItem: a limited start's transaction checks the stale holders it replaces
	// (dynamostore's limits.go; its records are under the lambda's keys too).
	statusActions = []string{"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"}
	// upstreamReadActions: a claim hands the task its upstreams' results, which may be other
	// lambdas' tasks (grantUpstreamReads).
	upstreamReadActions = []string{"dynamodb:BatchGetItem"}
)

// upstreamKeys are the partition keys of every lambda's task items (not gates, not counters).
var upstreamKeys = []string{"task#*"}

// grantUpstreamReads lets a status controller read any lambda's task items, as a claim reads its
// task's upstreams for their results, but only dynamostore.StateAttributes of them: never a
// payload, and no write. IAM cannot tell an upstream from another task, so the role may read the
// state (status, result, error, spec) of every task of every lambda: that much of the isolation
// between lambdas is given up for task flows. The role is atf's own: a handler never holds it
// (worker functions invoke the status function; an ECS handler runs without AWS credentials).
// The Null condition makes a read without a projection fail: ForAllValues alone allows a request
// that names no attributes, which would return whole items.
func (s *store) grantUpstreamReads(role awsiam.IRole) {
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(upstreamReadActions...),
		Resources: &[]*string{s.table.TableArn()},
		Conditions: &map[string]any{
			"ForAllValues:StringLike":   map[string]any{"dynamodb:LeadingKeys": upstreamKeys},
			"ForAllValues:StringEquals": map[string]any{"dynamodb:Attributes": dynamostore.StateAttributes},
			"StringEqualsIfExists":      map[string]any{"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
			"Null":                      map[string]any{"dynamodb:Attributes": "false"},
		},
	}))
}

// gateKeys is the partition key of the gates (dynamostore keeps them all under one).
var gateKeys = []string{"gate"}

// grantGateReads lets a status controller read the gates (a Query of their one partition), as a
// claim checks its task's gate: a task may wait in its queue for up to 15 minutes before it runs,
// and a gate closed meanwhile must hold it. It may not write them.
func (s *store) grantGateReads(role awsiam.IRole) {
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("dynamodb:Query"),
		Resources: &[]*string{s.table.TableArn()},
		Conditions: &map[string]any{
			"ForAllValues:StringEquals": map[string]any{"dynamodb:LeadingKeys": gateKeys},
		},
	}))
}

// grant lets role call actions on the table and its indexes, every lambda's items: for the API
// and the consumer, which serve every lambda.
func (s *store) grant(role awsiam.IRole, actions ...string) {
	s.table.Grant(role, *jsii.Strings(actions...)...)
	suppress(role, "AwsSolutions-IAM5", "The wildcard stands for the indexes of the task table (due, list and failed), which the store queries; no other table.",
		`/^Resource::<StoreTable[0-9A-F]{8}\.Arn>\/index\/\*$/`)
}

// grantLambda lets role call actions on one lambda's items only: a dynamodb:LeadingKeys
// condition allows the partition keys of its tasks and counters (dynamostore.LambdaKeyPatterns),
// so a lambda's status function or executor can neither read nor move another lambda's tasks,
// nor write the gates (it reads them: grantGateReads). No index: a status controller reads tasks
// by key.
func (s *store) grantLambda(role awsiam.IRole, lambda string, actions ...string) {
	role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(actions...),
		Resources: &[]*string{s.table.TableArn()},
		Conditions: &map[string]any{
			"ForAllValues:StringLike": map[string]any{"dynamodb:LeadingKeys": dynamostore.LambdaKeyPatterns(lambda)},
		},
	}))
}

// keys returns the partition and sort key of a key schema.
func keys(schema []types.KeySchemaElement) (pk, sk string) {
	for _, k := range schema {
		switch k.KeyType {
		case types.KeyTypeHash:
			pk = *k.AttributeName
		case types.KeyTypeRange:
			sk = *k.AttributeName
		}
	}
	if pk == "" || sk == "" {
		panic(fmt.Errorf("dynamostore.TableInput: key schema %v lacks a partition or sort key", schema))
	}
	return pk, sk
}
