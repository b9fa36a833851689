package gpucache

import (
	"testing"

	"github.com/strata-gnn/strata/dsp/cache"
)

func BenchmarkRouteProducts(b *testing.B) {
	const n, cols, k = 2449029, 100, 4
	plan, err := cache.NewPlan(evenBook(b, n, k), hotOrder(n, 1), cols, cache.PlanConfig{BudgetBytes: n * 4 * cols})
	if err != nil {
		b.Fatal(err)
	}
	r, err := NewRouter(plan, 1, n)
	if err != nil {
		b.Fatal(err)
	}
	nodes := randomNodes(n, 500000, 3)
	b.ResetTimer()
	for range b.N {
		if _, err := r.Route(nodes); err != nil {
			b.Fatal(err)
		}
	}
}
