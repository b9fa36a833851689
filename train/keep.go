package train

import (
	"fmt"

	"github.com/strata-gnn/strata/nn"
	"github.com/strata-gnn/strata/tensor/backend"
)

// Keeper keeps a host copy of the parameters a saved model holds: those
// of the epoch the report's headline selects (Common.Select: the best
// validation accuracy, ties to the lower validation loss then the earlier
// epoch, as Report.Summarize picks; or the last epoch). Every trainer
// offers it each recorded epoch on device 0 (train.Run, fullgraph.Run,
// dsp/engine.Run), which downloads the parameters only when the epoch
// becomes the selected one. A nil Keeper keeps nothing.
//
// Link prediction (package link: link.Run and link/multi.RunDSP) offers
// its epochs as link.EpochRecord.Selection gives them: the validation
// AUC in place of the accuracy, so that the rule is the link report's.
type Keeper struct {
	rule   string
	sel    *EpochRecord     // the selected epoch so far
	params []nn.NamedTensor // its parameters, nil when it came before a resume
	note   string
}

// NewKeeper keeps by rule (SelectBest or SelectLast).
func NewKeeper(rule string) *Keeper { return &Keeper{rule: rule} }

// Resumed tells the keeper the epochs a resumed run had finished before
// it started: their parameters are gone, but a later epoch must beat the
// best of them to be kept as the best.
func (k *Keeper) Resumed(history []EpochRecord) {
	if k == nil {
		return
	}
	for i := range history {
		if rec := &history[i]; k.selects(rec) {
			r := *rec
			k.sel, k.params = &r, nil
		}
	}
}

// selects reports whether rec (evaluated after every epoch offered so
// far) replaces the selected epoch.
func (k *Keeper) selects(rec *EpochRecord) bool {
	if rec.EvalSkipped {
		return false
	}
	return k.sel == nil || k.rule == SelectLast || Better(rec, k.sel)
}

// Offer considers the epoch rec just recorded (last: the run's final
// epoch), whose parameters are params on b.
func (k *Keeper) Offer(rec *EpochRecord, last bool, b backend.Backend, params []*nn.Param) error {
	if k == nil {
		return nil
	}
	keep, note := k.selects(rec), ""
	if last && !keep && k.params == nil {
		// The best epoch came before a resume: its parameters are not in
		// the checkpoint, so the final ones are saved instead.
		keep = true
		note = fmt.Sprintf("the best validation epoch (%d) came before the run was resumed; its parameters were not kept, so these are the last epoch's", k.sel.Epoch)
	}
	if !keep {
		return nil
	}
	ps, err := nn.SaveParams(b, params)
	if err != nil {
		return fmt.Errorf("keeping the parameters of epoch %d: %w", rec.Epoch, err)
	}
	r := *rec
	k.sel, k.params, k.note = &r, ps, note
	return nil
}

// Kept returns the kept epoch, its parameters and a note when they are
// not the epoch the rule selects; ok is false when no epoch was kept.
func (k *Keeper) Kept() (rec EpochRecord, params []nn.NamedTensor, note string, ok bool) {
	if k == nil || k.sel == nil || k.params == nil {
		return EpochRecord{}, nil, "", false
	}
	return *k.sel, k.params, k.note, true
}
