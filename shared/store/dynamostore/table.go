package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableInput describes the table: on-demand, keys pk and sk, the due, list and failed indexes. The CDK
// stack declares the same table; `atf dev --backend aws --create` and tests create it with this.
func TableInput(table string) *dynamodb.CreateTableInput {
	attr := func(name string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS}
	}
	key := func(pk, sk string) []types.KeySchemaElement {
		return []types.KeySchemaElement{
			{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(sk), KeyType: types.KeyTypeRange},
		}
	}
	index := func(name, pk, sk string, projected []string) types.GlobalSecondaryIndex {
		projection := &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: projected}
		if len(projected) == 0 {
			projection = &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly} // INCLUDE takes one attribute at least
		}
		return types.GlobalSecondaryIndex{IndexName: aws.String(name), KeySchema: key(pk, sk), Projection: projection}
	}
	return &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			attr(attrPK), attr(attrSK), attr(attrDuePK), attr(attrDueSK), attr(attrListPK), attr(attrListSK),
			attr(attrFailedPK), attr(attrFailedSK),
		},
		KeySchema: key(attrPK, attrSK),
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			index(DueIndex, attrDuePK, attrDueSK, dueProjection),
			index(ListIndex, attrListPK, attrListSK, listProjection),
			index(FailedIndex, attrFailedPK, attrFailedSK, failedProjection),
		},
	}
}

// TTLAttribute is the attribute DynamoDB's TTL reads: epoch seconds after which a finished task
// may be deleted.
const TTLAttribute = attrExpires

// CreateTable creates the table if it is missing, waits until it is active and turns on TTL.
func CreateTable(ctx context.Context, db *dynamodb.Client, table string) error {
	_, err := db.CreateTable(ctx, TableInput(table))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: create table %s: %w", table, err)
	}
	described, err := dynamodb.NewTableExistsWaiter(db).WaitForOutput(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 2*time.Minute)
	if err != nil {
		return fmt.Errorf("dynamostore: wait for table %s: %w", table, err)
	}
	// A table made by an older version may lack an index this one reads (list2 replaced list).
	for _, want := range TableInput(table).GlobalSecondaryIndexes {
		if !slices.ContainsFunc(described.Table.GlobalSecondaryIndexes, func(g types.GlobalSecondaryIndexDescription) bool {
			return aws.ToString(g.IndexName) == aws.ToString(want.IndexName)
		}) {
			return fmt.Errorf("dynamostore: table %s has no index %s: an older atf made it; docs/data-model.md says how to upgrade it", table, aws.ToString(want.IndexName))
		}
	}
	ttl, err := db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("dynamostore: table %s: describe TTL: %w", table, err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && (d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(TTLAttribute), Enabled: aws.Bool(true)},
	})
	if err != nil {
		return fmt.Errorf("dynamostore: table %s: enable TTL: %w", table, err)
	}
	return nil
}

// DeleteTable deletes the table; tests use it to clean up.
func DeleteTable(ctx context.Context, db *dynamodb.Client, table string) error {
	_, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	return err
}
