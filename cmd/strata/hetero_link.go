package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/strata-gnn/strata/dataset"
	"github.com/strata-gnn/strata/dataset/split"
	"github.com/strata-gnn/strata/link"
	"github.com/strata-gnn/strata/train"
)

// 'strata train --task link --model rgcn|hsage --link-relation R':
// link prediction on one relation of a typed dataset (link.RunHetero).

// heteroLinkConfig is link.HeteroDefaults under the typed flags
// (heteroConfigFrom) and the link flags typed runs read; the relation is
// set once the dataset names it (resolveRelation).
func (c *trainCmd) heteroLinkConfig() (link.HeteroConfig, error) {
	f := &c.Link
	cfg := link.HeteroDefaults(c.Model, f.Relation)
	hc, err := c.heteroConfigFrom(cfg.HeteroConfig, false)
	if err != nil {
		return cfg, err
	}
	cfg.HeteroConfig = hc
	if f.SplitEdges != "" {
		if cfg.Split, err = link.ParseFractions(f.SplitEdges); err != nil {
			return cfg, configFlag(err)
		}
	}
	setInt(&cfg.NegRatio, f.NegRatio)
	if f.NegSampling != "" {
		cfg.NegSample = f.NegSampling
	}
	cfg.NegExclude = f.NegExclude
	setInt(&cfg.HitsK, f.HitsK)
	if f.Decoder != "" {
		cfg.Decoder = f.Decoder
	}
	if cfg.Relation == "" {
		cfg.Relation = "?" // named by resolveRelation; the rest is checked now
	}
	if err := cfg.Validate(); err != nil {
		return cfg, configFlag(err)
	}
	return cfg, nil
}

// resolveRelation finds the relation of h that --link-relation spec
// names and returns its full name (src___rel___dst). Accepted spellings:
// SRC,REL,DST, src___rel___dst, PyG's src__rel__dst (an edge type's
// string form), and REL alone when only one relation has that name.
// Errors are usage errors listing h's relations.
func resolveRelation(h *dataset.Hetero, spec string) (string, error) {
	names := make([]string, len(h.EdgeTypes))
	for e := range h.EdgeTypes {
		names[e] = h.EdgeTypeName(e)
	}
	known := strings.Join(names, ", ")
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return "", usageError{fmt.Errorf("--link-relation: name the relation whose links are predicted, SRC,REL,DST; %s has %s", h.Name, known)}
	}
	parts := strings.Split(spec, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	var full, bare []string
	for e, et := range h.EdgeTypes {
		s, d := h.NodeTypes[et.Src].Name, h.NodeTypes[et.Dst].Name
		switch {
		case spec == names[e], spec == s+"__"+et.Rel+"__"+d,
			len(parts) == 3 && parts[0] == s && parts[1] == et.Rel && parts[2] == d:
			full = append(full, names[e])
		case spec == et.Rel:
			bare = append(bare, names[e])
		}
	}
	switch {
	case len(full) == 1:
		return full[0], nil
	case len(full) == 0 && len(bare) == 1:
		return bare[0], nil
	case len(full)+len(bare) > 1:
		return "", usageError{fmt.Errorf("--link-relation %q names several relations of %s (%s): give SRC,REL,DST", truncateFlag(spec), h.Name, strings.Join(append(full, bare...), ", "))}
	}
	return "", usageError{fmt.Errorf("--link-relation %q names no relation of %s; it has %s (give SRC,REL,DST)", truncateFlag(spec), h.Name, known)}
}

// runHeteroLink is 'strata train --task link' with --model rgcn or hsage.
func (c *trainCmd) runHeteroLink(e *env) error {
	cfg, err := c.heteroLinkConfig()
	if err != nil {
		return err
	}
	stored, err := c.storedEdgeSplit()
	if err != nil {
		return err
	}
	keep, err := c.checkSave()
	if err != nil {
		return err
	}
	log, b, h, closeDS, err := c.openHeteroRun(e)
	if err != nil {
		return err
	}
	defer closeDS()
	if cfg.Relation, err = resolveRelation(h, c.Link.Relation); err != nil {
		return err
	}
	var es *split.EdgeSplit
	if stored {
		// The stored split of the relation (strata split --link-relation),
		// checked against it; a split of another relation is refused.
		if es, err = split.ReadRelationEdges(c.Dataset, h, h.EdgeType(cfg.Relation)); err != nil {
			return err
		}
		if log != nil {
			fmt.Fprintf(log, "edge split: %s (seed %d): %d train, %d validation, %d test links of %s\n", filepath.Join(c.Dataset, split.EdgeSplitDir),
				es.Seed, len(es.Src[0]), len(es.Src[1]), len(es.Src[2]), es.Relation)
		}
	}
	smp := typedSampler(b)
	if log != nil {
		fmt.Fprintf(log, "training link prediction of %s with %s on %s (%d nodes in %d types, %d edges in %d relations) on %s\n",
			cfg.Relation, cfg.Model, h.Name, h.NumNodes(), len(h.NodeTypes), h.NumEdges(), len(h.EdgeTypes), b.Name())
		fmt.Fprintf(log, "config: link %s %s, %s, decoder %s, batch %d edges, fanouts %v per relation", cfg.Model, train.Sampled, cfg.Common.Layout(), cfg.Decoder, cfg.BatchSize, cfg.Fanouts)
		for _, name := range slices.Sorted(maps.Keys(cfg.RelFanouts)) {
			fmt.Fprintf(log, ", %s %v", name, cfg.RelFanouts[name])
		}
		excl := ""
		if cfg.NegExclude {
			excl = ", excluding known edges"
		}
		fmt.Fprintf(log, ", split %v, %d %s negative(s) per edge%s, Hits@%d, %s\n", cfg.Split, cfg.NegRatio, cfg.NegSample, excl, cfg.HitsK, cfg.Common.Schedule())
		if smp != nil {
			fmt.Fprintf(log, "sampling typed batches on %s\n", b.Name())
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	rep, err := link.RunHetero(ctx, h, cfg, link.Options{Backend: b, Log: log, TypedSampler: smp, EdgeSplit: es, Keep: keep})
	var ce *train.ConfigError
	if errors.As(err, &ce) {
		return configFlag(err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "relation            %s\n", rep.Relation)
	printLinkReport(e, rep.Report, start)
	if err := c.saveTypedLinkModel(e, keep, h, cfg, rep); err != nil {
		return err
	}
	return c.writeOutputs(rep.WriteJSON, nil)
}
