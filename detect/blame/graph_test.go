package blame

import (
	"slices"
	"testing"
)

func TestEnds(t *testing.T) {
	w := func(a, b int) Wait[int] { return Wait[int]{Waiter: a, Awaited: b, Open: true} }
	less := func(a, b int) bool { return a < b }
	for _, tc := range []struct {
		name   string
		edges  []Wait[int]
		roots  []int
		cycles [][]int
	}{
		{"a chain ends at its root", []Wait[int]{w(1, 2), w(2, 3)}, []int{3}, nil},
		{"two chains, one root", []Wait[int]{w(1, 3), w(2, 3)}, []int{3}, nil},
		{"a cycle waits for no one outside", []Wait[int]{w(5, 4), w(4, 5)}, nil, [][]int{{4, 5}}},
		{"a cycle that waits on a root is no end", []Wait[int]{w(5, 6), w(6, 5), w(6, 3)}, []int{3}, nil},
		{"closed waits and the zero member lead nowhere", []Wait[int]{{Waiter: 1, Awaited: 2}, w(0, 2), w(3, 0)}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			roots, cycles := NewGraph(tc.edges, less).Ends()
			if !slices.Equal(roots, tc.roots) || len(cycles) != len(tc.cycles) {
				t.Fatalf("roots %v cycles %v, want %v %v", roots, cycles, tc.roots, tc.cycles)
			}
			for i := range cycles {
				if !slices.Equal(cycles[i], tc.cycles[i]) {
					t.Fatalf("cycle %v, want %v", cycles[i], tc.cycles[i])
				}
			}
		})
	}
}

// A chain of 100k waits is followed without growing the stack.
func TestLongChain(t *testing.T) {
	var edges []Wait[int]
	for i := 1; i < 100000; i++ {
		edges = append(edges, Wait[int]{Waiter: i, Awaited: i + 1, Open: true})
	}
	g := NewGraph(edges, func(a, b int) bool { return a < b })
	if roots, _ := g.Ends(); !slices.Equal(roots, []int{100000}) {
		t.Fatalf("roots %v", roots)
	}
	if who, _ := g.Waiters(100000); len(who) != 99999 || who[0] != 99999 {
		t.Fatalf("%d waiters, nearest %v", len(who), who[:1])
	}
}
