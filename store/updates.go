package store

import "context"

// UpdateOneByOne implements Store.UpdateMessages with UpdateMessage, one
// update after the other, for a backend with no cheaper way to do many.
func UpdateOneByOne(ctx context.Context, update func(ctx context.Context, appKey string, id int64, fn func(*Message) error) (Message, error), updates []MessageUpdate) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	errs := make([]error, len(updates))
	for i, u := range updates {
		_, errs[i] = update(ctx, u.AppKey, u.ID, u.Fn)
	}
	return errs, nil
}
