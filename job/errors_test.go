package job_test

import (
	"errors"

	"github.com/devmsg/devmsg/errdefs"
)

func containsField(err error, field string) bool {
	var inv *errdefs.InvalidError
	return errors.As(err, &inv) && inv.Field == field
}
