package main

import "errors"

// importCmd is 'strata import'. TEMPORARY until the importer API is final.
type importCmd struct{}

func (c *importCmd) Run(e *env) error { return errors.New("not implemented yet") }

// genCmd is 'strata gen'. TEMPORARY until dataset/gen lands.
type genCmd struct{}

func (c *genCmd) Run(e *env) error { return errors.New("not implemented yet") }
