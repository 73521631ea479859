package kernels

// SlotsIn reports whether every slot's row of kvDim floats lies within a
// store of n floats, so AttnScoresAVX2 and AttnMixAVX2 may follow the slot
// table unchecked.
func SlotsIn(slots []int32, kvDim, n int) bool {
	limit := n/kvDim - 1
	for _, s := range slots {
		if s < 0 || int(s) > limit {
			return false
		}
	}
	return true
}
