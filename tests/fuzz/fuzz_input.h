/* Reading a fuzz input: little-endian fields, zeros once it is used up
 * (every input is a valid one). */
#ifndef UROCE_TESTS_FUZZ_INPUT_H
#define UROCE_TESTS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

struct in {
	const uint8_t *p;
	size_t n;
};

static inline uint8_t u8(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static inline uint16_t u16(struct in *in)
{
	uint16_t lo = u8(in);
	return (uint16_t)(lo | u8(in) << 8);
}

static inline uint32_t u32(struct in *in)
{
	uint32_t lo = u16(in);
	return lo | (uint32_t)u16(in) << 16;
}

#endif
