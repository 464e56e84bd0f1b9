/* report_assets.c: the page `acttrace report` writes (tools/report/: page.html, the head with its CSS
 * and the skeleton, and report.js, its script), linked into the tool as NUL-terminated strings. They
 * are kept as files of their own so they read, and check (node --check), as what they are. The
 * Makefile rebuilds this object when they change. */
__asm__(".section .rodata\n"
        ".global at_report_page\n"
        ".hidden at_report_page\n"
        ".type at_report_page, @object\n"
        "at_report_page:\n"
        ".incbin \"tools/report/page.html\"\n"
        ".byte 0\n"
        ".size at_report_page, . - at_report_page\n"
        ".global at_report_js\n"
        ".hidden at_report_js\n"
        ".type at_report_js, @object\n"
        "at_report_js:\n"
        ".incbin \"tools/report/report.js\"\n"
        ".byte 0\n"
        ".size at_report_js, . - at_report_js\n"
        ".previous\n");
