/* placeholder: the badge script is being written */
