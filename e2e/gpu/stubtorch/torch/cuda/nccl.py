def version():
    return (2, 28, 9)
