package partition

// pqueue is a binary max-heap of vertices keyed by int64 gains, with a
// position index so keys can be updated and vertices removed in O(log n).
// Its behavior is a pure function of the sequence of operations, so the
// refinement that uses it is deterministic.
type pqueue struct {
	heap []pqItem
	pos  []int32 // vertex -> index in heap, -1 when absent
}

type pqItem struct {
	key int64
	v   int32
}

func newPQueue(n int) *pqueue {
	q := &pqueue{pos: make([]int32, n)}
	for i := range q.pos {
		q.pos[i] = -1
	}
	return q
}

func (q *pqueue) len() int { return len(q.heap) }

func (q *pqueue) contains(v int32) bool { return q.pos[v] >= 0 }

// reset empties the queue in O(len).
func (q *pqueue) reset() {
	for _, it := range q.heap {
		q.pos[it.v] = -1
	}
	q.heap = q.heap[:0]
}

func (q *pqueue) insert(v int32, key int64) {
	q.heap = append(q.heap, pqItem{key, v})
	i := len(q.heap) - 1
	q.pos[v] = int32(i)
	q.up(i)
}

func (q *pqueue) update(v int32, key int64) {
	i := int(q.pos[v])
	old := q.heap[i].key
	q.heap[i].key = key
	if key > old {
		q.up(i)
	} else if key < old {
		q.down(i)
	}
}

func (q *pqueue) remove(v int32) {
	i := int(q.pos[v])
	q.pos[v] = -1
	last := len(q.heap) - 1
	if i != last {
		q.heap[i] = q.heap[last]
		q.pos[q.heap[i].v] = int32(i)
		q.heap = q.heap[:last]
		q.down(i)
		q.up(i)
		return
	}
	q.heap = q.heap[:last]
}

// pop removes and returns the vertex with the largest key (-1 if empty).
func (q *pqueue) pop() int32 {
	if len(q.heap) == 0 {
		return -1
	}
	v := q.heap[0].v
	q.remove(v)
	return v
}

// topKey returns the largest key; the queue must not be empty.
func (q *pqueue) topKey() int64 { return q.heap[0].key }

func (q *pqueue) up(i int) {
	it := q.heap[i]
	for i > 0 {
		p := (i - 1) / 2
		if q.heap[p].key >= it.key {
			break
		}
		q.heap[i] = q.heap[p]
		q.pos[q.heap[i].v] = int32(i)
		i = p
	}
	q.heap[i] = it
	q.pos[it.v] = int32(i)
}

func (q *pqueue) down(i int) {
	it := q.heap[i]
	n := len(q.heap)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && q.heap[c+1].key > q.heap[c].key {
			c++
		}
		if q.heap[c].key <= it.key {
			break
		}
		q.heap[i] = q.heap[c]
		q.pos[q.heap[i].v] = int32(i)
		i = c
	}
	q.heap[i] = it
	q.pos[it.v] = int32(i)
}
