package main

import (
	"context"
	"errors"
)

func benchBaseline(ctx context.Context, args []string) (int, error) {
	return 2, errors.New("testbed bench-baseline: not yet")
}
