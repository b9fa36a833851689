package serve

import (
	"fmt"

	"github.com/strata-gnn/strata/graph"
	"github.com/strata-gnn/strata/serve/servepb"
)

// Shard is the part of the feature table a server holds: the rows of
// nodes Lo .. Lo+len(X)/Dim-1, row-major (a machine's own rows, written
// by `strata partition --machines`; the DSP engine's feature service).
// A Features request for another row is refused naming the node, so a
// client that routes a row to the wrong machine learns it at once.
type Shard struct {
	Lo  int64
	X   []float32
	Dim int
}

// Rows is the number of rows the shard holds.
func (sh *Shard) Rows() int64 { return int64(len(sh.X) / sh.Dim) }

func (sh *Shard) check(n int64) error {
	switch {
	case sh.Dim <= 0:
		return fmt.Errorf("serve: shard of %d columns", sh.Dim)
	case len(sh.X)%sh.Dim != 0:
		return fmt.Errorf("serve: shard of %d values is not whole rows of %d", len(sh.X), sh.Dim)
	case sh.Lo < 0 || sh.Lo+sh.Rows() > n:
		return fmt.Errorf("serve: shard rows [%d, %d) outside the dataset's %d nodes", sh.Lo, sh.Lo+sh.Rows(), n)
	}
	return nil
}

// shardFeatures answers a Features request from the shard (labels, when
// asked, from the dataset).
func (s *Server) shardFeatures(req *servepb.FeaturesRequest) (*servepb.FeaturesReply, error) {
	sh := s.opt.Shard
	if req.Labels && s.ds.Labels == nil {
		return nil, reqErr(ErrUnavailable, "labels", -1, "the dataset %q has no labels", s.ds.Name)
	}
	row := 4 * sh.Dim
	if req.Labels {
		row += 4
	}
	maxRows := (s.opt.MaxSendBytes - 256) / row
	ids, err := DecodeIDs(req.Ids, "ids", s.n, maxRows)
	if err != nil {
		return nil, err
	}
	hi := sh.Lo + sh.Rows()
	local := make([]graph.NodeID, len(ids))
	for i, v := range ids {
		if int64(v) < sh.Lo || int64(v) >= hi {
			return nil, reqErr(ErrUnavailable, "ids", i, "node %d is not in this server's shard [%d, %d)", v, sh.Lo, hi)
		}
		local[i] = graph.NodeID(int64(v) - sh.Lo)
	}
	rep := &servepb.FeaturesReply{X: gatherRows(sh.X, sh.Dim, local)}
	if req.Labels {
		rep.Y = gatherLabels(s.ds.Labels, ids)
	}
	s.metrics.featureRows.Add(float64(len(ids)))
	return rep, nil
}
