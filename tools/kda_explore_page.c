/* kda_explore_page.c: the page of `kda explore` (tools/explore/explorer.html: HTML, CSS and
 * script), built into kda as one NUL-terminated string.
 * SPDX-License-Identifier: MIT
 *
 * The page is kept as a file of its own so that it can be read, linted and loaded as it is;
 * the assembler's .incbin puts its bytes into kda (the Makefile makes this object depend on
 * the file).  kda_cmd_explore.c writes it with the data of a case in place of its marker.
 */
__asm__(".section .rodata\n"
        ".global kda_explore_page\n"
        ".type kda_explore_page, @object\n"
        "kda_explore_page:\n"
        ".incbin \"tools/explore/explorer.html\"\n"
        ".byte 0\n"
        ".size kda_explore_page, . - kda_explore_page\n"
        ".previous\n");
