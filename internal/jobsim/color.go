package jobsim

// pythonTupleColor is the color PyTorch gives ncclCommSplit for a group of ranks:
// abs(hash(tuple(ranks))) % 2**31 (torch.distributed's _process_group_color), with CPython
// 3.8+'s tuple hash of small non-negative ints. The real capture's new_group over ranks
// (0, 1) printed color 2130503744, which this reproduces.
func pythonTupleColor(ranks []int) int {
	const (
		prime1 uint64 = 11400714785074694791
		prime2 uint64 = 14029467366897019727
		prime5 uint64 = 2870177450012600261
	)
	acc := prime5
	for _, r := range ranks {
		acc += uint64(r) * prime2 // hash(int) is the int itself below 2**61-1
		acc = acc<<31 | acc>>33
		acc *= prime1
	}
	acc += uint64(len(ranks)) ^ (prime5 ^ 3527539)
	if acc == ^uint64(0) {
		acc = 1546275796
	}
	h := int64(acc)
	if h < 0 {
		h = -h // abs() of a Python int: no overflow there; -MinInt64 % 2**31 is 0 here too
	}
	return int(uint64(h) % (1 << 31))
}
