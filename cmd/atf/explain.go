package main

import (
	"errors"
	"fmt"
	"net/http"
	"syscall"

	"github.com/openatf/atf/shared/client"
)

// explain says what to do about the errors a new user meets first, in the CLI's own terms: an
// API that wants a token, or no API at the endpoint.
func explain(err error, c *client.Client) error {
	var apiErr *client.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized && c.SigV4 == nil:
		if c.Token == "" {
			return fmt.Errorf("the API at %s needs a token: give --token TOKEN or set ATF_TOKEN (%d %s)", c.Endpoint, apiErr.Status, apiErr.Code)
		}
		return fmt.Errorf("the API at %s refused the token of --token or ATF_TOKEN (%d %s)", c.Endpoint, apiErr.Status, apiErr.Code)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing answers at %s: start atf dev, or give the API's address with --endpoint or ATF_ENDPOINT (%w)", c.Endpoint, err)
	}
	return err
}
