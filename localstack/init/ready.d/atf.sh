#!/bin/bash
# LocalStack runs this when it is ready (mounted at /etc/localstack/init/ready.d by
# localstack/docker-compose.yml). atf creates its own table and queues, so nothing is created here.
echo "atf: LocalStack is ready; DynamoDB and SQS answer on http://localhost:4566 from the host."
echo "atf: export AWS_ENDPOINT_URL=http://localhost:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test"
echo "atf: then 'atf dev --backend aws --create' creates the table and the queues."
