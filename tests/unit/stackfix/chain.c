/* chain.c: a call chain inside a dlopen'ed library (see README.md). */
#ifdef STK_STRIPPED
#define STK_LOCAL static
#else
#define STK_LOCAL
#endif

typedef void (*stk_cb)(void);

__attribute__((noinline)) STK_LOCAL void stk_lib_inner(stk_cb cb)
{
    cb();
    __asm__ volatile("" ::: "memory"); /* not a tail call: the frame stays */
}

__attribute__((noinline)) STK_LOCAL void stk_lib_outer(stk_cb cb)
{
    stk_lib_inner(cb);
    __asm__ volatile("" ::: "memory");
}

__attribute__((visibility("default"))) void stk_lib_entry(stk_cb cb)
{
    stk_lib_outer(cb);
    __asm__ volatile("" ::: "memory");
}
