// Package optim updates nn.Params from their accumulated gradients: Adam
// (the fused backend.AdamStep, L2 weight decay added to the gradient as in
// torch.optim.Adam) and SGD with momentum and weight decay (as
// torch.optim.SGD with dampening 0, no Nesterov).
//
// Optimizer state (moment buffers by parameter name, and the step count)
// can be exported to the host and loaded back for checkpoints; a restored
// optimizer continues bit-identically.
package optim
