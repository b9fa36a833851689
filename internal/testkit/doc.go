// Package testkit holds helpers shared by Strata's tests, such as locating
// the real datasets under /work/shared/datasets.
package testkit
