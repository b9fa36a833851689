package main

import (
	"testing"

	"github.com/strata-gnn/strata/internal/testkit"
)

func sharedDir(t *testing.T) string { return testkit.DatasetsDir(t) }
