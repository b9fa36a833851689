// Package model saves and loads trained models: 'strata train --save DIR'
// writes one, and 'strata predict', 'embed' and 'evaluate' read it.
//
// A saved model is a directory of two files, each written atomically:
//
//	DIR/model.safetensors  the parameters, float32, named as PyTorch
//	                       Geometric's modules name them
//	DIR/model.json         what the parameters mean: format version,
//	                       architecture, layers, widths, heads, feature
//	                       normalization, class count, the dataset's
//	                       fingerprint, the Strata version, the epoch
//	                       selected and the training configuration, and
//	                       the SHA-256 of model.safetensors
//
// # Tensor names
//
// The weights load with load_state_dict(strict=True) into a PyG model
// whose layers are a ModuleList named convs (torch_geometric.nn.models.
// GraphSAGE and GCN; an explicit list of GATConv for GAT, whose output
// layer has its own head count). PyG's Linear stores its weight as
// [out, in], the transpose of Strata's [in, out] matrices:
//
//	Strata (nn)                PyG (layer K)            shape
//	sage layerK.neigh.weight   convs.K.lin_l.weight     [out, in]
//	sage layerK.bias           convs.K.lin_l.bias       [out]
//	sage layerK.self.weight    convs.K.lin_r.weight     [out, in]
//	gcn  layerK.weight         convs.K.lin.weight       [out, in]
//	gcn  layerK.bias           convs.K.bias             [out]
//	gat  layerK.weight         convs.K.lin.weight       [heads*dim, in]
//	gat  layerK.attn_l         convs.K.att_src          [1, heads, dim]
//	gat  layerK.attn_r         convs.K.att_dst          [1, heads, dim]
//	gat  layerK.bias           convs.K.bias             [heads*dim] or [dim]
//
// Typed models (rgcn, hsage; model.json version 2 with a "typed"
// section: node types and widths, relations, target) use PyG's
// HeteroConv names: convs.K.convs.<src___rel___dst>.lin_l/lin_r for the
// SAGEConv of each relation, and roots.K.<type> for the Linear of a
// type's root terms (R-GCN's per-type root; hsage's types no relation
// enters), which HeteroConv has no module for. The layout comes from
// nn.HeteroParamSpecs, the one NewHetero builds from.
//
// docs/models.md gives the differences between Strata's layers and PyG's
// that matter (GCN's normalization of directed graphs, self-loops GAT
// keeps, dropout placement).
//
// # Reading
//
// Load trusts nothing: model.json is read with a size bound, every field
// is checked against the limits of package train before anything is sized
// from it, the weights file must have the size the dimensions imply (a
// header of at most MaxHeaderBytes) and the hash model.json records, and
// every tensor must be present once with its exact name, dtype (F32),
// shape and finite values. Errors are *FormatError values naming the file
// and what is wrong; FuzzLoad exercises the reader.
package model
